// One request header's value. Node hands a header over as a string or, for the few it keeps every copy
// of, as an array; a value sent more than once is ambiguous (which copy did the client mean, which did a
// proxy add?), so it counts as absent everywhere: identity, credential and CSRF checks then refuse
// rather than pick one.

export function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? undefined : value;
}

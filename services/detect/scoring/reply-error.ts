// A refusal that a decoder process or a scoring worker sent back as {code?, message}: the error of the
// table it names (4005 for an undecodable image, …), or 503/5001 for anything else, with the worker's
// message kept as the cause (it is not for the client).

import { ApiError, errorNameForCode } from '../../../lib/common/errors.ts';

export function errorFromReply(reply: { code?: number | undefined; message: string }): ApiError {
  const name = reply.code === undefined ? undefined : errorNameForCode(reply.code);
  return name
    ? new ApiError(name, reply.message)
    : new ApiError('UNAVAILABLE', undefined, {}, new Error(reply.message));
}

/** The embedded accounts file cannot be used (unreadable, not ours, locked too long): refuse to start. */
export class AccountsFileError extends Error {
  override name = 'AccountsFileError';
}

// A password for `set-password`, never from argv (where `ps` and the shell history would show it): the
// first line of stdin when it is piped, or typed twice at a prompt that does not echo.

import { createInterface } from 'node:readline';
import { Writable } from 'node:stream';

export async function readPassword(
  input: NodeJS.ReadStream = process.stdin,
  output: NodeJS.WriteStream = process.stderr,
): Promise<string> {
  if (!input.isTTY) return firstLine(input);
  const first = await prompt(input, output, 'New password: ');
  const again = await prompt(input, output, 'Repeat it: ');
  if (first !== again) throw new PasswordEntryError('the two passwords differ');
  return first;
}

export class PasswordEntryError extends Error {}

async function firstLine(input: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of input) {
    text += String(chunk);
    if (text.includes('\n')) break;
  }
  const line = text.split(/\r?\n/)[0] ?? '';
  if (line === '')
    throw new PasswordEntryError('no password on stdin (pipe it in, or run in a terminal to be asked)');
  return line;
}

function prompt(input: NodeJS.ReadStream, output: NodeJS.WriteStream, question: string): Promise<string> {
  output.write(question);
  // What is typed goes nowhere: the terminal shows nothing of it.
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  const rl = createInterface({ input, output: silent, terminal: true });
  return new Promise((resolve) => {
    rl.question('', (answer) => {
      rl.close();
      output.write('\n');
      resolve(answer);
    });
  });
}

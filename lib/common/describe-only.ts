// A route's validator that accepts every request: for routes whose schemas describe their input (for the
// published document and for readers) while the handler checks it itself and refuses it with a message
// of the error table (detect reads its body as a stream; the console parses its JSON bodies field by
// field).

import type { FastifySchemaCompiler } from 'fastify';

export const describeOnly: FastifySchemaCompiler<unknown> = () => () => true;

// Worker entry point. Node 20 does not apply `--import tsx` loader hooks to a worker's entry module,
// so this plain module loads the TypeScript worker through tsx's API.
import { tsImport } from 'tsx/esm/api';

await tsImport('./scorer-worker.ts', import.meta.url);

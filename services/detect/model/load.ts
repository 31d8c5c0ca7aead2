// Loads the configured classifier: converts the bundled nsfwjs weights on first use (checksummed),
// then opens an ONNX Runtime session on them.

import type { Config } from '../../common/config.ts';
import type { Classifier } from './classifier.ts';
import { createOnnxClassifier } from './onnx-classifier.ts';

export async function loadClassifier(config: Config): Promise<Classifier> {
  return createOnnxClassifier({ model: config.model, intraOpThreads: config.inferenceThreads });
}

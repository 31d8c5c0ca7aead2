// The chart refuses at render what every process would refuse at boot for a rule a range cannot say:
// the settings table's `below` (lib/common/settings.ts), from which `npm run settings` generates the
// chart's `fail`. Here the thresholds, probabilities: allow must be less than block (spec 2's review
// band lies between them), as THRESHOLD_ALLOW < THRESHOLD_BLOCK at boot. Rendering only.

import { afterAll, expect, it } from 'vitest';
import { describeWithTool, HELM } from '../support/tools.ts';
import { CHART_DIR, helm, removeHelmHome } from './helm.ts';

// --set-json: `--set` passes a decimal as a string, which the chart's schema refuses before any rule.
const template = (values: Record<string, number>) =>
  helm([
    'template',
    'x',
    CHART_DIR,
    ...Object.entries(values).flatMap(([k, v]) => ['--set-json', `${k}=${v}`]),
    '--show-only',
    'templates/detect-deployment.yaml',
  ]);

describeWithTool([HELM], 'the chart and the thresholds', () => {
  afterAll(() => removeHelmHome());

  it('refuses config.thresholdAllow not below config.thresholdBlock, naming both values', async () => {
    const refusals: Array<[number, number, string]> = [
      [0.5, 0.5, '0.5 and 0.5'],
      [0.9, 0.25, '0.9 and 0.25'],
      [1, 0, '1 and 0'],
    ];
    for (const [allow, block, got] of refusals) {
      const refused = await template({ 'config.thresholdAllow': allow, 'config.thresholdBlock': block });
      expect(refused.code, refused.stdout).not.toBe(0);
      expect(refused.stderr).toContain(
        `config.thresholdAllow must be less than config.thresholdBlock (the review band lies between them), got ${got}`,
      );
    }
  });

  it('renders thresholds whose allow is below block, however close', async () => {
    const rendered = await template({ 'config.thresholdAllow': 0.4999, 'config.thresholdBlock': 0.5 });
    expect(rendered.code, rendered.stderr).toBe(0);
    expect(rendered.stdout).toContain('{ name: THRESHOLD_ALLOW, value: "0.4999" }');
    expect(rendered.stdout).toContain('{ name: THRESHOLD_BLOCK, value: "0.5" }');
    const zero = await template({ 'config.thresholdAllow': 0, 'config.thresholdBlock': 1 });
    expect(zero.code, zero.stderr).toBe(0);
  });
});

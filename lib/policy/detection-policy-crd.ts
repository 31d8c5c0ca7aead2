// The DetectionPolicy CRD (charts/nsfwdetector/crds/detectionpolicies.yaml), built from the settings
// table: each spec field is the setting whose `crd` names it, with its type, range and documentation,
// and no default — a field a policy leaves out stays as the deployment is configured, which only the
// services know (the API server would otherwise fill its own numbers in). The rules of rules.ts are
// stated again as CEL so the API server refuses what the services would.

import { modelChoicePattern } from '../common/model-catalogue.ts';
import { SETTINGS, type Setting } from '../common/settings.ts';

type Schema = { [key: string]: unknown };

/** The groups of the spec: a group is given whole or left out, so its rule can be checked on its own. */
const GROUPS: Record<string, { description: string; rule?: { rule: string; message: string } }> = {
  thresholds: {
    description: 'Decision thresholds on the NSFW probability, both given.',
    rule: {
      rule: 'self.allow < self.block',
      message: 'thresholds.allow must be lower than thresholds.block',
    },
  },
  anonymous: {
    description: 'Limits of calls without an API key, per client IP; both given.',
    rule: {
      rule: 'self.perMinute <= self.perDay',
      message: 'anonymous.perMinute must not exceed anonymous.perDay',
    },
  },
  tiers: { description: 'Quotas per account tier.' },
  'tiers.free': {
    description: 'Quota of a free account (shared by its keys); both given.',
    rule: {
      rule: 'self.perMinute <= self.perDay',
      message: 'tiers.free.perMinute must not exceed tiers.free.perDay',
    },
  },
  'tiers.pro': {
    description: 'Quota of a pro account (shared by its keys); both given.',
    rule: {
      rule: 'self.perMinute <= self.perDay',
      message: 'tiers.pro.perMinute must not exceed tiers.pro.perDay',
    },
  },
  upload: { description: 'Upload limits.' },
};

/** Groups whose every field is required once the group is given. */
const WHOLE = new Set(['thresholds', 'anonymous', 'tiers.free', 'tiers.pro']);

function fieldSchema(name: string, s: Setting): Schema {
  const chart = s.chart ? ` (chart value \`config.${s.chart.key}\`)` : '';
  const description = `${s.doc} Left out: ${name} as the deployment sets it${chart}.`;
  switch (s.type) {
    case 'integer':
      return { type: 'integer', minimum: s.min, ...(s.max !== undefined && { maximum: s.max }), description };
    case 'number':
      return { type: 'number', minimum: s.min, maximum: s.max, description };
    case 'model':
      return { type: 'string', pattern: modelChoicePattern(), description };
    case 'enum':
      return { type: 'string', enum: [...s.values], description };
    case 'string':
      return { type: 'string', ...(s.pattern && { pattern: s.pattern }), description };
  }
}

/** The `spec` schema: every setting with a `crd` field, grouped by its path. */
export function detectionPolicySpecSchema(): Schema {
  const root: Schema = {
    type: 'object',
    description:
      'What the policy changes; the services apply it on their next request. A field left out stays as the deployment is configured (the chart’s `config` values; the spec’s numbers by default).',
    properties: {},
  };
  const group = (path: string[]): Schema => {
    let node = root;
    for (let i = 0; i < path.length; i++) {
      const key = path.slice(0, i + 1).join('.');
      const properties = node.properties as Record<string, Schema>;
      const info = GROUPS[key];
      if (!info)
        throw new Error(`settings: the CRD group ${key} has no description (detection-policy-crd.ts)`);
      properties[path[i] as string] ??= {
        type: 'object',
        description: info.description,
        ...(WHOLE.has(key) && { required: [] }),
        properties: {},
        ...(info.rule && { 'x-kubernetes-validations': [info.rule] }),
      };
      node = properties[path[i] as string] as Schema;
    }
    return node;
  };
  for (const [name, s] of Object.entries(SETTINGS) as Array<[string, Setting]>) {
    if (!s.crd) continue;
    const path = s.crd.split('.');
    const field = path.pop() as string;
    const parent = group(path);
    (parent.properties as Record<string, Schema>)[field] = fieldSchema(name, s);
    if (Array.isArray(parent.required)) parent.required.push(field);
  }
  // Key order: type, description, required, properties, validations (as written above).
  return root;
}

const STATUS: Schema = {
  type: 'object',
  description: 'What the operator did with the policy.',
  properties: {
    observedGeneration: { type: 'integer', description: 'The generation the conditions describe.' },
    configMap: { type: 'string', description: 'The ConfigMap holding the rendered policy file.' },
    conditions: {
      type: 'array',
      description: 'Ready, Progressing, Degraded.',
      'x-kubernetes-list-type': 'map',
      'x-kubernetes-list-map-keys': ['type'],
      items: {
        type: 'object',
        description: 'One condition.',
        required: ['type', 'status'],
        properties: {
          type: { type: 'string', description: 'Ready, Progressing or Degraded.' },
          status: {
            type: 'string',
            enum: ['True', 'False', 'Unknown'],
            description: 'The condition’s status.',
          },
          reason: { type: 'string', description: 'Machine-readable reason.' },
          message: { type: 'string', description: 'Human-readable message.' },
          observedGeneration: { type: 'integer', description: 'The generation this condition is about.' },
          lastTransitionTime: {
            type: 'string',
            format: 'date-time',
            description: 'When the status last changed.',
          },
        },
      },
    },
  },
};

export const DETECTION_POLICY_CRD_HEADER = `# DetectionPolicy: the moderation policy in force (thresholds, model, anonymous/tier/upload limits). The
# operator renders what a policy states into the ConfigMap \`<name>-policy\` that detect and gateway pods
# mount; what it leaves out stays as the deployment is configured. One policy per installation: the
# operator applies the oldest (by creationTimestamp, then name) and marks every other one Degraded
# (reason Superseded).
# Generated from lib/common/settings.ts by \`npm run settings\`: edit there, not here.
`;

export function detectionPolicyCrd(): Schema {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'detectionpolicies.nsfwdetector.io' },
    spec: {
      group: 'nsfwdetector.io',
      names: {
        kind: 'DetectionPolicy',
        listKind: 'DetectionPolicyList',
        plural: 'detectionpolicies',
        singular: 'detectionpolicy',
        shortNames: ['dp'],
      },
      scope: 'Namespaced',
      versions: [
        {
          name: 'v1alpha1',
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: 'Allow', type: 'number', jsonPath: '.spec.thresholds.allow' },
            { name: 'Block', type: 'number', jsonPath: '.spec.thresholds.block' },
            { name: 'Model', type: 'string', jsonPath: '.spec.model' },
            { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
            { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
          ],
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description: 'The moderation policy of an nsfwdetector installation.',
              properties: { spec: detectionPolicySpecSchema(), status: STATUS },
            },
          },
        },
      ],
    },
  };
}

// The routes more than one process knows by path: detect serves them, the quota service counts them
// (ext_authz sees the original path), detect's edge hook guards them.

/** Spec 3: the detect endpoints, anonymous (`public`) and with an API key (`open`). */
export const DETECT_ROUTES = { public: '/api/public/detect', open: '/api/open/detect' } as const;
export type DetectEndpoint = keyof typeof DETECT_ROUTES;

/** The detect endpoint a path is, or undefined. */
export function detectEndpointOf(path: string): DetectEndpoint | undefined {
  if (path === DETECT_ROUTES.public) return 'public';
  if (path === DETECT_ROUTES.open) return 'open';
  return undefined;
}

/** The methods the servers route (405 answers list those a path has in `Allow`). */
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

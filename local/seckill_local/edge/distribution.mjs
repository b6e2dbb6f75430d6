// The distribution's cache behaviors as CloudFront applies them to a viewer request: the
// first behavior whose path pattern matches decides which methods are allowed and which
// viewer-request function runs. The behaviors come from the edge stack's EdgeDistribution
// (edge/template.yaml, read by seckill_local.edge.distribution), so the local edge
// refuses what the stack refuses.

// "CloudFront normalizes URI paths consistent with RFC 3986 and then matches the path with
// the correct cache behavior. Once the cache behavior is matched, CloudFront sends the raw
// URI path to the origin." (Path pattern, in
// docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/DownloadDistValuesCacheBehavior.html)
// So the normalized path only chooses the behavior; the function and the API get the raw one.
export function normalizePath(raw) {
  // RFC 3986 6.2.2.2: a percent-encoded unreserved character is that character (%2e is '.').
  const decoded = raw.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex) => {
    const char = String.fromCharCode(parseInt(hex, 16));
    return /[A-Za-z0-9\-._~]/.test(char) ? char : escape.toUpperCase();
  });
  // Repeated slashes go too, as the same page says of "multiple slashes (//)".
  return removeDotSegments(decoded.replace(/\/{2,}/g, '/'));
}

// RFC 3986 5.2.4 on an absolute path: '.' segments dropped, '..' removes the one before.
function removeDotSegments(path) {
  const out = [];
  const segments = path.split('/').slice(1);
  segments.forEach((segment, index) => {
    const last = index === segments.length - 1;
    if (segment === '.' || segment === '..') {
      if (segment === '..') out.pop();
      if (last) out.push(''); // "/a/b/.." is "/a/", its trailing slash kept
    } else {
      out.push(segment);
    }
  });
  return `/${out.join('/')}`;
}

// A path pattern: '*' any run of characters ('/' included), '?' exactly one; case-sensitive;
// the leading '/' optional ("CloudFront behavior is the same with or without the leading /").
export function pathMatches(pattern, path) {
  const anchored = pattern.startsWith('/') || pattern === '*' ? pattern : `/${pattern}`;
  const source = [...anchored].map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[.+^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${source.join('')}$`, 's').test(path);
}

// The behavior for a request's raw path: the first listed that matches, the default last.
export function behaviorFor(behaviors, rawPath) {
  const path = normalizePath(rawPath);
  return behaviors.find((behavior) => pathMatches(behavior.pathPattern, path));
}

// The local edge's cache behaviors (local/seckill_local/edge/distribution.mjs): the path
// CloudFront matches on (RFC 3986 normalized), the path patterns, the first match deciding.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { behaviorFor, normalizePath, pathMatches } from '../../../local/seckill_local/edge/distribution.mjs';

// The shape of edge/template.yaml's EdgeDistribution (the edge stack), in its order.
const BEHAVIORS = [
  { pathPattern: '/voucher-order/seckill/*', function: 'press' },
  { pathPattern: '/voucher-order/*/payment*', function: 'deny' },
  { pathPattern: '/voucher-order/*', function: null },
  { pathPattern: '/voucher/list/*', function: null },
  { pathPattern: '*', function: 'deny' },
];

describe('normalizePath', () => {
  it('removes dot segments, as RFC 3986 5.2.4 does', () => {
    assert.equal(normalizePath('/voucher-order/seckill/999999/../2'), '/voucher-order/seckill/2');
    assert.equal(normalizePath('/a/./b/../../c'), '/c');
    assert.equal(normalizePath('/../../a'), '/a');
    assert.equal(normalizePath('/a/b/..'), '/a/');
    assert.equal(normalizePath('/a/.'), '/a/');
  });

  it('decodes percent-encoded unreserved characters first, so %2e%2e is a dot segment', () => {
    assert.equal(normalizePath('/voucher-order/seckill/9/%2e%2e/2'), '/voucher-order/seckill/2');
    assert.equal(normalizePath('/voucher-order/seckill/9/%2E./2'), '/voucher-order/seckill/2');
    assert.equal(normalizePath('/voucher%2dorder/%31'), '/voucher-order/1');
  });

  it('keeps reserved escapes encoded, so %2F is no segment boundary', () => {
    assert.equal(normalizePath('/voucher-order/1%2fpayment'), '/voucher-order/1%2Fpayment');
  });

  it('merges repeated slashes', () => {
    assert.equal(normalizePath('//voucher-order//seckill/1'), '/voucher-order/seckill/1');
  });
});

describe('pathMatches', () => {
  it('lets * run over slashes and ? stand for one character, case-sensitively', () => {
    assert.ok(pathMatches('/voucher-order/*/payment*', '/voucher-order/1/payment'));
    assert.ok(pathMatches('/voucher-order/*/payment*', '/voucher-order/a/b/payments'));
    assert.ok(pathMatches('/v?', '/v1'));
    assert.ok(!pathMatches('/v?', '/v12'));
    assert.ok(!pathMatches('/voucher/list/*', '/Voucher/list/1'));
    assert.ok(!pathMatches('/voucher/list/*', '/voucher/list'));
  });

  it('reads a pattern without its leading slash as one with it', () => {
    assert.ok(pathMatches('voucher/list/*', '/voucher/list/1'));
  });

  it('takes the pattern literally but for * and ?', () => {
    assert.ok(!pathMatches('/a.b/*', '/axb/1'));
    assert.ok(pathMatches('/a.b/*', '/a.b/1'));
  });
});

describe('behaviorFor', () => {
  const functionOf = (path) => behaviorFor(BEHAVIORS, path).function;

  it('takes the first behavior that matches, the default last', () => {
    assert.equal(functionOf('/voucher-order/seckill/1'), 'press');
    assert.equal(functionOf('/voucher-order/1/payment'), 'deny');
    assert.equal(functionOf('/voucher-order/1/cancel'), null);
    assert.equal(functionOf('/voucher/list/1'), null);
    assert.equal(functionOf('/voucher/seckill'), 'deny');
  });

  it('matches on the normalized path: a dot segment cannot walk past a behavior', () => {
    assert.equal(functionOf('/voucher-order/seckill/../1/payment'), 'deny');
    assert.equal(functionOf('/voucher/list/../seckill'), 'deny');
    assert.equal(functionOf('/voucher-order/seckill/999999/%2e%2e/2'), 'press');
  });
});

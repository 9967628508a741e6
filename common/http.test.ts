import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { pino } from 'pino';
import { InputError, OverloadedError, UnavailableError } from './errors.ts';
import { bearerToken, createHttpApp, listen, type Listening } from './http.ts';

const log = pino({ level: 'silent' });

describe('HTTP foundation', () => {
  let server: Listening;
  let base: string;
  let ready = false;
  before(async () => {
    const { app, finish } = createHttpApp({
      log,
      authToken: 'token-of-sixteen-chars',
      acceptQueryToken: true,
      isPublicPath: (path) => path.startsWith('/static/'),
      methods: ['GET', 'HEAD'],
      readiness: () => ({ ready, dependency: ready ? 'up' : 'down' }),
      metricsRegistry: new Registry(),
    });
    app.get('/static/x', (_req, res) => void res.send('asset'));
    app.get('/echo', (req, res) => void res.json(req.query));
    app.get('/bad', () => {
      throw new InputError('from: expected an ISO 8601 time');
    });
    app.get('/busy', async () => {
      throw new OverloadedError('too many reads', { retryAfterMs: 2500 });
    });
    app.get('/down', async () => {
      throw new UnavailableError('ClickHouse unreachable at /var/lib/secret', { retryAfterMs: 4000 });
    });
    app.get('/bug', () => {
      throw new TypeError("Cannot read properties of undefined (reading 'x') at /work/main/dashboards/x.ts:3");
    });
    finish();
    server = await listen(app, 0, '127.0.0.1');
    base = `http://127.0.0.1:${server.port}`;
  });
  after(() => server.close('now'));

  const auth = { headers: { authorization: 'Bearer token-of-sixteen-chars' } };

  it('reads the bearer scheme in any case and nothing else', () => {
    for (const header of ['Bearer abc', 'bearer abc', 'BEARER abc', 'bEaReR \tabc ']) assert.equal(bearerToken(header), 'abc', header);
    for (const header of ['Basic abc', 'Bearerabc', 'Bearer', 'Bearer a b', '', undefined])
      assert.equal(bearerToken(header), undefined, String(header));
  });

  it('asks for the token everywhere but health, readiness and public paths', async () => {
    assert.equal((await fetch(`${base}/echo`)).status, 401);
    assert.equal((await fetch(`${base}/echo`, { headers: { authorization: 'Bearer wrong-token-of-16-chars' } })).status, 401);
    assert.equal((await fetch(`${base}/metrics`)).status, 401);
    assert.equal((await fetch(`${base}/echo`, { headers: { authorization: 'bearer token-of-sixteen-chars' } })).status, 200);
    assert.equal((await fetch(`${base}/static/x`)).status, 200);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    assert.equal((await fetch(`${base}/metrics`, auth)).status, 200);
  });

  it('takes ?token= out of the query before a route sees it', async () => {
    const res = await fetch(`${base}/echo?a=1&token=token-of-sixteen-chars`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { a: '1' });
  });

  it('tells liveness from readiness', async () => {
    ready = false;
    const health = await fetch(`${base}/healthz`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: 'ok', ready: false, dependency: 'down' });
    assert.equal((await fetch(`${base}/readyz`)).status, 503);
    ready = true;
    assert.equal((await fetch(`${base}/readyz`)).status, 200);
  });

  it('answers errors by the error model, never with a stack or a path, always with nosniff', async () => {
    const cases: [string, number, RegExp, string | null][] = [
      ['/bad', 400, /from: expected an ISO 8601 time/, null],
      ['/busy', 429, /too many reads/, '3'],
      ['/down', 503, /^\{"error":"unavailable \(UNAVAILABLE\); retry in 4 s"\}$/, '4'],
      ['/bug', 500, /^\{"error":"internal error"\}$/, null],
      ['/constructor', 404, /no route GET \/constructor/, null],
      ['/__proto__', 404, /no route/, null],
    ];
    for (const [path, status, body, retryAfter] of cases) {
      const res = await fetch(`${base}${path}`, auth);
      const text = await res.text();
      assert.equal(res.status, status, path);
      assert.match(text, body, path);
      assert.doesNotMatch(text, /\bat |\/work\/|\/var\/|\.ts:/, `${path}: ${text}`);
      assert.equal(res.headers.get('retry-after'), retryAfter, path);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
    }
    const post = await fetch(`${base}/echo`, { method: 'POST', ...auth });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    assert.equal(post.headers.get('x-content-type-options'), 'nosniff');
  });
});

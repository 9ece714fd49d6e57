// A real OpenID provider (npm's oidc-provider) for the access tests, on loopback only.
//
//   node provider.mjs --port N --jwks keys.json --clients clients.json [--ttl SECONDS]
//
// (or OIDC_PORT, OIDC_JWKS_FILE, OIDC_CLIENTS_FILE, OIDC_ACCESS_TOKEN_TTL). keys.json is a JWK set
// with private parts; its first key signs, the others are only published (a rotation's
// successor or predecessor). clients.json is a list of {client_id, client_secret, groups, ttl,
// claims} (ttl: that client's access-token lifetime in seconds, default --ttl; claims: more
// claims its tokens carry, such as email and email_verified).
// The client-credentials grant issues JWT access tokens for the audience `tempoconf`, with
// `sub` = the client id and a `groups` claim. Nothing here reaches the network: no client uses
// a jwks_uri or sector identifier, and the issuer is this process's loopback address.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const AUDIENCE = 'tempoconf';
// A resource indicator is an absolute URI; the tokens' audience is the plain name.
const RESOURCE = 'urn:tempoconf:api';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.OIDC_PORT },
    jwks: { type: 'string', default: process.env.OIDC_JWKS_FILE },
    clients: { type: 'string', default: process.env.OIDC_CLIENTS_FILE },
    ttl: { type: 'string', default: process.env.OIDC_ACCESS_TOKEN_TTL ?? '600' },
  },
});

function fail(message) {
  console.error(`provider.mjs: ${message}`);
  process.exit(2);
}

function readJson(path, what) {
  if (!path) fail(`${what} is missing (see the usage at the top of provider.mjs)`);
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    return fail(`${what} ${path}: ${error.message}`);
  }
}

const port = Number.parseInt(args.port ?? '', 10);
if (!Number.isInteger(port) || port <= 0 || port > 65535) fail(`--port: not a port: ${args.port}`);
const ttl = Number.parseInt(args.ttl, 10);
if (!Number.isInteger(ttl) || ttl <= 0) fail(`--ttl: not a positive number of seconds: ${args.ttl}`);

const jwks = readJson(args.jwks, '--jwks');
if (!Array.isArray(jwks.keys) || jwks.keys.length === 0) fail('--jwks: no "keys"');
const clients = readJson(args.clients, '--clients');
if (!Array.isArray(clients)) fail('--clients: not a list');
const groupsOf = new Map(clients.map((client) => [client.client_id, client.groups ?? []]));
const ttlOf = new Map(clients.map((client) => [client.client_id, client.ttl ?? ttl]));
const claimsOf = new Map(clients.map((client) => [client.client_id, client.claims ?? {}]));

// The first key signs (named by its kid below); the others are only published.
const signingKey = jwks.keys[0];
const signingAlg = signingKey.alg ?? fail('--jwks: the first key has no "alg"');

const issuer = `http://127.0.0.1:${port}`;
const provider = new Provider(issuer, {
  jwks,
  clients: clients.map(({ client_id, client_secret }) => ({
    client_id,
    client_secret,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
  })),
  features: {
    clientCredentials: { enabled: true },
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      // Every token is for tempoconf, whether or not the client names the resource.
      defaultResource: () => RESOURCE,
      getResourceServerInfo: (_ctx, _resource, client) => ({
        audience: AUDIENCE,
        accessTokenFormat: 'jwt',
        accessTokenTTL: ttlOf.get(client.clientId) ?? ttl,
        scope: '',
        jwt: { sign: { alg: signingAlg, kid: signingKey.kid } },
      }),
    },
  },
  // Its clients' defaults name an algorithm its keys can sign with (RS256 otherwise).
  clientDefaults: {
    grant_types: ['client_credentials'],
    id_token_signed_response_alg: signingAlg,
    response_types: [],
  },
  extraTokenClaims: (_ctx, token) => ({
    ...(claimsOf.get(token.clientId) ?? {}),
    groups: groupsOf.get(token.clientId) ?? [],
  }),
  ttl: { ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? ttl },
  // Only the test keeps these cookies' secrets: there are no browser interactions.
  cookies: { keys: ['tempoconf-tests-only'] },
});

// One line per request, so a test's log shows each discovery and JWKS fetch.
provider.use(async (ctx, next) => {
  await next();
  console.log(`${ctx.method} ${ctx.path} ${ctx.status}`);
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer} signing with ${signingKey.kid} (${signingAlg})`);
});

// SIGTERM: close at once (a restart on the same port follows).
process.on('SIGTERM', () => process.exit(0));

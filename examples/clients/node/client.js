// floe.v1 from Node.js: every kind of ID, a stream, and sequences WEAK and STRONG.
//
// Usage: node client.js [ADDRESS]   (default: $FLOE_GRPC, else 127.0.0.1:34904)
//
// The proto is loaded at run time (@grpc/proto-loader), from floe's source tree or
// $FLOE_PROTO_DIR. 64-bit values (Snowflake IDs, sequence IDs) are asked for as decimal
// strings (longs: String): a JavaScript number loses integers above 2^53.
//
// Prints one line per ID: `NextIds KIND VALUE TEXT` and `StreamIds KIND VALUE TEXT` (VALUE: a
// Snowflake ID's number, any other kind's bytes in hex; TEXT: the ID's text, answered by the
// server), then `NextSequence WEAK|STRONG ID` and `StreamSequence STRONG ID`.
'use strict';

const path = require('node:path');
const { promisify } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const protoDir =
  process.env.FLOE_PROTO_DIR ||
  path.join(__dirname, '..', '..', '..', 'crates', 'floe-server', 'proto');
const definition = protoLoader.loadSync('floe/v1/floe.proto', {
  includeDirs: [protoDir],
  longs: String,
  enums: String,
  defaults: true,
});
const { floe } = grpc.loadPackageDefinition(definition);

const KINDS = ['snowflake', 'sno', 'lexical', 'uuid7', 'ulid'];
const kindEnum = (kind) => `KIND_${kind.toUpperCase()}`;
const deadline = (seconds) => ({ deadline: Date.now() + seconds * 1000 });

function printIds(method, kind, response) {
  // Snowflake IDs come as numbers (here decimal strings), the others as bytes (a Buffer).
  const values =
    kind === 'snowflake' ? response.numbers : response.binary.map((b) => b.toString('hex'));
  values.forEach((value, i) => console.log(method, kind, value, response.text[i]));
}

// Resolves when a server stream has ended, calling onMessage for each message.
function eachMessage(call, onMessage) {
  return new Promise((resolve, reject) => {
    call.on('data', onMessage);
    call.on('error', reject);
    call.on('end', resolve);
  });
}

async function main() {
  const address = process.argv[2] || process.env.FLOE_GRPC || '127.0.0.1:34904';
  const client = new floe.v1.Floe(address, grpc.credentials.createInsecure());
  const nextIds = promisify(client.nextIds.bind(client));
  const nextSequence = promisify(client.nextSequence.bind(client));
  try {
    for (const kind of KINDS) {
      const ids = await nextIds({ kind: kindEnum(kind), count: 3, withText: true }, deadline(10));
      printIds('NextIds', kind, ids);
    }

    // A bulk export: 1,000 Snowflake IDs in messages of 250.
    const ids = client.streamIds(
      { kind: 'KIND_SNOWFLAKE', total: 1000, batch: 250, withText: true },
      deadline(30),
    );
    await eachMessage(ids, (message) => printIds('StreamIds', 'snowflake', message));

    // Sequences on the server's only store ("" picks it): WEAK IDs increase for this server; a
    // STRONG batch is a run of consecutive IDs.
    for (const [increment, key] of [['WEAK', 'orders'], ['STRONG', 'invoices']]) {
      for (let i = 0; i < 2; i++) {
        const request = { key, increment: `INCREMENT_${increment}`, count: 5 };
        const answer = await nextSequence(request, deadline(10));
        answer.ids.forEach((id) => console.log('NextSequence', increment, id));
      }
    }

    const sequence = client.streamSequence(
      { key: 'invoices', increment: 'INCREMENT_STRONG', total: 20, batch: 8 },
      deadline(30),
    );
    await eachMessage(sequence, (message) =>
      message.ids.forEach((id) => console.log('StreamSequence STRONG', id)),
    );
  } finally {
    client.close();
  }
}

main().catch((e) => {
  const code = e.code !== undefined ? grpc.status[e.code] : '';
  console.error(`floe: ${code ? `${code}: ${e.details}` : e.message}`);
  process.exitCode = 1;
});

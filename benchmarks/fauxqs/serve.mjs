// fauxqs on the port given, without its per-request log lines (they would cost the
// server more than the requests it answers). Run with the Node.js this folder installs.
import { startFauxqs } from "fauxqs";

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error("usage: node serve.mjs PORT");
  process.exit(2);
}
await startFauxqs({ port, logger: false });

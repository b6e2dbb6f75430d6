// fauxqs on the port given, on the loopback interface only, without its per-request
// log lines (they would cost the server more than the requests it answers).
// Run with the Node.js this folder installs: node serve.mjs PORT
import net from "node:net";

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error("usage: node serve.mjs PORT");
  process.exit(2);
}

// fauxqs listens on every interface (0.0.0.0) and has no option to change it; a
// benchmark's queue server has no business being reachable from the network.
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (options, ...rest) {
  if (options && typeof options === "object" && options.host === "0.0.0.0") {
    options = { ...options, host: "127.0.0.1" };
  }
  return listen.call(this, options, ...rest);
};

const { startFauxqs } = await import("fauxqs");
await startFauxqs({ port, logger: false });

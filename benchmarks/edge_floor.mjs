// The floor of the edge benchmark: one HTTP round trip to Node.js, answered with a
// fixed status and body and no work at all (no function, no store).
//   node edge_floor.mjs STATUS BODY   prints "floor listening on <port>"
import http from 'node:http';

const [status, body] = process.argv.slice(2);
const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(Number(status), headers);
    res.end(body);
  });
});
// As the edge server's listeners, so that both keep the clients' connections alike.
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => console.log(`floor listening on ${server.address().port}`));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();

import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy to 127.0.0.1:targetPort that can be paused (connections are reset) or frozen (the
 * open connections stop carrying data without closing, as over a dropped network; new ones work).
 */
export async function startPausableProxy(targetPort: string | number) {
  let paused = false;
  let frozen = false;
  let refused = 0;
  let upgrades = 0;
  const sockets = new Set<Socket>();
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    if (paused) {
      refused++;
      client.destroy();
      return;
    }
    if (frozen) {
      // accepted, and then nothing: a connection into a network that is gone
      sockets.add(client);
      client.on("data", () => {}).on("error", () => {});
      return;
    }
    const upstream = connect(Number(targetPort), "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      pairs.delete(pair);
    };
    client.once("data", (head: Buffer) => {
      if (/\r\nupgrade:\s*websocket\r\n/i.test(head.toString("latin1"))) upgrades++;
    });
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    get refused() {
      return refused;
    },
    /** WebSocket upgrade requests passed on to the target so far. */
    get upgrades() {
      return upgrades;
    },
    pause() {
      paused = true;
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    resume() {
      paused = false;
    },
    /**
     * Open connections go silent: nothing passes either way, and neither end is told. With
     * `newOnes`, connections made until thaw() are accepted and then silent too.
     */
    freeze(newOnes = false) {
      frozen = newOnes;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.on("data", () => {});
        upstream.on("data", () => {});
      }
      pairs.clear();
    },
    thaw() {
      frozen = false;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}


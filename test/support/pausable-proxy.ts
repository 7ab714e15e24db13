import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy to 127.0.0.1:targetPort that can be paused (connections are reset) or frozen (the
 * open connections stop carrying data without closing, as over a dropped network; new ones work),
 * or made to cut the next WebSocket once it has passed a given number of bytes to the client.
 */
export async function startPausableProxy(targetPort: string | number) {
  let paused = false;
  let frozen = false;
  let refused = 0;
  let upgrades = 0;
  // Armed by cutWebSocketAfter: the next WebSocket's budget of bytes towards the client, and who waits for the cut.
  let armed: { bytes: number; cut: () => void } | null = null;
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
    // The target says nothing before the request: what goes back is wired once its first bytes show what it is.
    client.once("data", (head: Buffer) => {
      const upgrade = /\r\nupgrade:\s*websocket\r\n/i.test(head.toString("latin1"));
      if (upgrade) upgrades++;
      if (upgrade && armed) {
        meterTo(client, upstream, armed, pair);
        armed = null;
      } else upstream.pipe(client);
    });
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
    client.pipe(upstream);
  });
  /**
   * Passes `budget.bytes` bytes from upstream to client, then ends the client's connection and
   * pauses the proxy (new connections are refused from the moment the budget is spent).
   */
  const meterTo = (client: Socket, upstream: Socket, budget: { bytes: number; cut: () => void }, pair: [Socket, Socket]) => {
    let passed = 0;
    const forward = (chunk: Buffer) => {
      if (!pairs.has(pair)) return; // frozen, or gone
      if (passed + chunk.length < budget.bytes) {
        passed += chunk.length;
        if (!client.write(chunk)) {
          upstream.pause();
          client.once("drain", () => upstream.resume());
        }
        return;
      }
      upstream.off("data", forward);
      upstream.on("data", () => {});
      paused = true;
      client.end(chunk.subarray(0, budget.bytes - passed), () => {
        pause();
        budget.cut();
      });
    };
    upstream.on("data", forward);
    upstream.on("end", () => client.end());
  };
  const pause = () => {
    paused = true;
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
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
    pause,
    /**
     * The next WebSocket passes `bytes` bytes (its handshake answer included) to the client, then its
     * connection ends and the proxy pauses (as `pause()`); resolves then. However fast both ends
     * are, the client has had those bytes and no more.
     */
    cutWebSocketAfter(bytes: number): Promise<void> {
      return new Promise<void>((cut) => { armed = { bytes, cut }; });
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


/**
 * Appends that reach an actor together share one storage commit.
 *
 * workerd commits an actor's implicit transaction at the end of every turn that wrote; on local
 * disk that commit (a WAL write and an fsync) costs far more than a small append's insert. So an
 * append whose body is in waits while other appends to the same actor are still reading theirs
 * (never longer than `maxWaitMs`), and then all of them write, in arrival order, in one turn:
 * one transaction, one commit. An append that is alone writes at once, with no delay.
 *
 * Only when the group is released do the waiting appends run their own logic (validation,
 * producer checks, the insert), one after the other: each is decided exactly as if it had
 * arrived alone right after the one before it.
 */
export class CommitGroup {
  private reading = 0;
  private waiting: (() => void)[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly maxWaitMs = 2) {}

  /**
   * Reads one append's body as a member of the group. Resolves with the body once this append
   * may write; the caller must then write without awaiting anything first, or it writes in a
   * turn of its own.
   */
  async read<T>(readBody: () => Promise<T>): Promise<T> {
    this.reading += 1;
    let body: T;
    try {
      body = await readBody();
    } catch (err) {
      this.reading -= 1;
      if (this.reading === 0 && this.waiting.length > 0) this.release();
      throw err;
    }
    this.reading -= 1;
    if (this.reading === 0 && this.waiting.length === 0) return body;
    await new Promise<void>((resolve) => {
      this.waiting.push(resolve);
      if (this.reading === 0) this.release();
      else this.timer ??= setTimeout(() => this.release(), this.maxWaitMs);
    });
    return body;
  }

  /** Appends now waiting for another to read its body (tests and diagnostics). */
  get size(): number {
    return this.waiting.length;
  }

  private release(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const all = this.waiting;
    this.waiting = [];
    // Resolved in arrival order: their continuations run in this order within one turn.
    for (const go of all) go();
  }
}

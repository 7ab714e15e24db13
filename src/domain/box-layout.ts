/**
 * Where things live in a box (HOME-relative: boxes run as a non-root user) and the environment
 * the control plane hands the runner. Shared by the worker (which writes them) and the runner
 * (which reads them), so the two can never disagree.
 */
export const BOX_DIR = ".threadbox";
export const RUNNER_PATH = `${BOX_DIR}/runner.mjs`;
export const MIRROR_PATH = `${BOX_DIR}/mirror.mjs`;
/**
 * The harness's working directory; a delegate's repository goes to `${WORK_DIR}/repo` (on a shared
 * box `${WORK_DIR}/repo-<hash of URL and branch>`), an environment's to `${WORK_DIR}/<its path>`.
 */
export const WORK_DIR = "work";
/** pi's config dir (models.json, settings.json, sessions) inside the box. */
export const PI_AGENT_DIR = `${BOX_DIR}/pi-agent`;

/** One run's files: prompt, runner log, rebuilt session. */
export const runDir = (runId: string) => `${BOX_DIR}/runs/${runId}`;

/**
 * The file a launch leaves the run's stream token in, HOME-relative: the runner reads it and
 * removes it (and any other `stream-token-*` of its run, from a launch attempt that never started
 * a runner). `attempt` tells a retried launch's file from the one a runner already took.
 */
export const STREAM_TOKEN_FILE_PREFIX = "stream-token-";
export const streamTokenPath = (runId: string, attempt: string) => `${runDir(runId)}/${STREAM_TOKEN_FILE_PREFIX}${attempt}`;

/** Where the runner of a thread's current run records its pid. */
export const runnerPidPath = (threadId: string) => `${BOX_DIR}/runner-${threadId}.pid`;

/** The runner's environment variables. */
export const BOX_ENV = {
  threadId: "THREADBOX_THREAD_ID",
  streamUrl: "THREADBOX_STREAM_URL",
  /**
   * Path (absolute, or HOME-relative) of a file holding the stream token. Never the token itself:
   * a variable stays readable in /proc/<pid>/environ to every command of the box for the life of
   * the process, whatever the process later deletes from its environment.
   */
  streamTokenFile: "THREADBOX_STREAM_TOKEN_FILE",
  runId: "THREADBOX_RUN_ID",
  authorId: "THREADBOX_AUTHOR_ID",
  mirrorNextIndex: "THREADBOX_MIRROR_NEXT_INDEX",
  heartbeatMs: "THREADBOX_HEARTBEAT_MS",
  runawayMs: "THREADBOX_RUNAWAY_MS",
  startTimeoutMs: "THREADBOX_START_TIMEOUT_MS",
  idleAfterInterruptMs: "THREADBOX_IDLE_AFTER_INTERRUPT_MS",
  killGraceMs: "THREADBOX_KILL_GRACE_MS",
  flushTimeoutMs: "THREADBOX_FLUSH_TIMEOUT_MS",
  artifactsTimeoutMs: "THREADBOX_ARTIFACTS_TIMEOUT_MS",
  steering: "THREADBOX_STEERING",
  /** Comma-separated names of the environment's secret variables (their values never leave the box). */
  secretNames: "THREADBOX_SECRET_NAMES",
  /** JSON array of the environment's files marked sensitive, relative to the working directory. */
  sensitiveFiles: "THREADBOX_SENSITIVE_FILES",
} as const;

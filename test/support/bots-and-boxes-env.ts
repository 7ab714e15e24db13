// The environment body of the end-to-end tests where bots (in the worker) and pi (in boxes on the
// local host) both talk to scripted model servers, through one piModels config.
export function botsAndBoxesEnvironment(o: { name: string; botBaseUrl: string; piBaseUrl: string; botKey: string; piKey: string }) {
  return {
    name: o.name,
    env: { PI_OFFLINE: "1", THREADBOX_HEARTBEAT_MS: "500" },
    secrets: { BOT_KEY: o.botKey, PI_KEY: o.piKey },
    piModels: {
      providers: {
        bots: { baseUrl: o.botBaseUrl, api: "openai-completions", apiKey: "$BOT_KEY", models: [{ id: "bot-model" }] },
        local: { baseUrl: o.piBaseUrl, api: "openai-completions", apiKey: "$PI_KEY", models: [{ id: "scripted-model" }] },
      },
    },
    piSettings: { retry: { enabled: false } },
    model: "local/scripted-model",
    provider: "daytona",
  };
}

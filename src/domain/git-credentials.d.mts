export function gitCredentialEnv(username: string, password: string): Record<string, string>;

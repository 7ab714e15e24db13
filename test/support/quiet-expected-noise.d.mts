export function isExpectedWorkerdNoise(chunk: unknown): boolean;
export default function quietExpectedWorkerdNoise(): void;

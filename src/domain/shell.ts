/** Quotes one word for a POSIX shell: the box runs every command through `sh -c`. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Shell steps, run in a checkout whose remote is `origin`, that fetch one commit, branch or tag
 * by name (`depth` commits deep) and leave what to check out in `$c`. A short commit id cannot be
 * fetched by name: then every branch and tag is (the whole history, a shallow checkout deepened),
 * and the id is looked up in them.
 */
export function fetchRefSteps(at: string, url: string, depth?: number): string {
  const byName = `git fetch --quiet${depth ? ` --depth ${Math.trunc(depth)}` : ""} origin ${shq(at)} && c=FETCH_HEAD`;
  const unshallow = `$(test -f "$(git rev-parse --git-dir)/shallow" && echo --unshallow)`;
  const byLookup = `git fetch --quiet --tags ${unshallow} origin '+refs/heads/*:refs/remotes/origin/*' && c=$(git rev-parse --verify --quiet ${shq(`${at}^{commit}`)})`;
  return `{ ${byName} || { ${byLookup}; } || { echo ${shq(`no commit, branch or tag ${at} in ${url}`)} >&2; false; }; }`;
}

// The gateway the tests talk to, from the environment the Go test sets.
export function gateway() {
  const url = process.env.TOLLGATE_URL;
  const token = process.env.TOLLGATE_TOKEN;
  if (!url || !token) {
    throw new Error("set TOLLGATE_URL and TOLLGATE_TOKEN (frameworks_test.go does)");
  }
  return { url: url.replace(/\/$/, ""), token };
}

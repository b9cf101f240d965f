/**
 * A real `delayd serve` for the tests, from the binary in DELAYD_BIN
 * (default: the repository's target/debug/delayd), on a free 127.0.0.1
 * port with a temporary data directory and the beanstalkd listener off,
 * as the Python client's tests do (clients/python/tests/conftest.py).
 */

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";

const here = fileURLToPath(new URL(".", import.meta.url));
/** clients/typescript (the tests run from build/test/). */
export const PACKAGE_DIR = resolve(here, "../..");
const REPO = resolve(PACKAGE_DIR, "../..");

export function delaydBin(): string {
  const bin = process.env["DELAYD_BIN"] || join(REPO, "target", "debug", "delayd");
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`no delayd binary at ${bin}: run \`cargo build -p delayd\` or set DELAYD_BIN`);
  }
  return bin;
}

/** A port that was free a moment ago (the server is retried on another
 * one if it is taken between the probe and the bind). */
function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
    });
  });
}

export interface Server {
  url: string;
  proc: ChildProcess;
  dir: string;
  /** SIGTERM, then the exit code (the API promises 0). */
  stop(): Promise<number | null>;
}

async function ready(url: string, proc: ChildProcess, deadline: number): Promise<boolean> {
  while (Date.now() < deadline && proc.exitCode === null) {
    try {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1000) });
      if (res.status === 200) return true;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

export async function startServer(extra: readonly string[] = []): Promise<Server> {
  const bin = delaydBin(); // before the temporary directory: nothing to clean up
  const dir = mkdtempSync(join(tmpdir(), "delayd-ts-"));
  const logPath = join(dir, "serve.log");
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const log = openSync(logPath, "a");
    const args = ["serve", "--http", `127.0.0.1:${port}`, "--beanstalk", "off"];
    args.push("--data", join(dir, "data"), "--disk-reserve", "0", ...extra);
    const proc = spawn(bin, args, { stdio: ["ignore", log, log] });
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    if (await ready(url, proc, Date.now() + 20_000)) {
      return {
        url,
        proc,
        dir,
        async stop() {
          if (proc.exitCode === null) proc.kill("SIGTERM");
          const code = await exited;
          rmSync(dir, { recursive: true, force: true });
          return code;
        },
      };
    }
    if (proc.exitCode === null) proc.kill("SIGKILL");
    await exited;
  }
  const log = readFileSync(logPath, "utf8").slice(-2000);
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`delayd serve did not start; log:\n${log}`);
}

/** A fresh queue name per test; a "/" in it tests the path encoding. */
export function queueName(prefix = "ts"): string {
  return `${prefix}/${randomUUID().slice(0, 12)}`;
}

/** Polls `check` until it returns true or `ms` pass. */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 10_000, what = "condition") {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Whether the server implements flow control: its document has the key
 * route (the client's flow features are tested only then). */
export function hasFlow(doc: Record<string, unknown>): boolean {
  const paths = doc["paths"] as Record<string, unknown> | undefined;
  return paths !== undefined && "/v1/queues/{queue}/keys/{key}" in paths;
}

export const FLOW_SKIP = "the server has no flow control yet (no /v1/queues/{queue}/keys/{key} in /openapi.json)";

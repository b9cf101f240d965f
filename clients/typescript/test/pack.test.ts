/**
 * The published artifact: `npm pack`, installed into a fresh directory,
 * imported by name in Node, and type-checked from a TypeScript consumer
 * (the declarations resolve through package.json "exports"). Also: the
 * tarball holds dist/ and no tests or sources, and has no dependencies.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { PACKAGE_DIR } from "./server.js";

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
let dir: string;
let consumer: string;
let files: string[];

before(() => {
  dir = mkdtempSync(join(tmpdir(), "delayd-pack-"));
  // --ignore-scripts: the test script has just built dist/; prepack's
  // rebuild would rewrite it under the other test files running now.
  const out = execFileSync(npm, ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], {
    cwd: PACKAGE_DIR,
    encoding: "utf8",
    // `npm test` sets npm_config_* of its own; the pack must not inherit a dry run.
    env: { ...process.env, npm_config_dry_run: "false" },
  });
  const [info] = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
  assert.ok(info);
  files = info.files.map((f) => f.path);
  consumer = join(dir, "consumer");
  mkdirSync(consumer);
  writeFileSync(join(consumer, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  // No dependencies: installing the tarball needs no registry.
  execFileSync(npm, ["install", "--offline", "--no-audit", "--no-fund", join(dir, info.filename)], {
    cwd: consumer,
    encoding: "utf8",
  });
});

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the tarball holds the built package only", () => {
  assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"));
  assert.ok(files.includes("package.json") && files.includes("README.md"));
  assert.deepEqual(
    files.filter((f) => !f.startsWith("dist/") && !["package.json", "README.md"].includes(f)),
    [],
  );
  const pkg = JSON.parse(readFileSync(join(consumer, "node_modules", "delayd", "package.json"), "utf8")) as Record<
    string,
    unknown
  >;
  assert.equal(pkg["dependencies"], undefined, "no runtime dependencies");
});

test("node imports it by name", () => {
  const out = execFileSync(
    process.execPath,
    [
      "-e",
      "import('delayd').then((m) => console.log(typeof m.DelaydClient, typeof m.verifyPush, new m.LeaseMismatch('x').status))",
    ],
    { cwd: consumer, encoding: "utf8" },
  );
  assert.equal(out.trim(), "function function 409");
});

test("a strict TypeScript consumer type-checks against its declarations", () => {
  writeFileSync(
    join(consumer, "use.ts"),
    [
      'import { DelaydClient, Defer, LeaseMismatch, verifyPush, type Enqueued, type Message } from "delayd";',
      'const c = new DelaydClient({ url: "http://127.0.0.1:7070", token: "t" });',
      'const e: Promise<Enqueued> = c.enqueue("q", "p", { delay_ms: 1, key: "k" });',
      'const m: Promise<Message> = c.getMessage("q", "id");',
      'void c.work("q", async (d) => { if (d.attempt > 3) throw new Defer(1000); return d.json<{ n: number }>().n; }, { concurrency: 2 });',
      'void verifyPush({ secret: "s", body: new Uint8Array(), headers: {} });',
      "const err: unknown = null;",
      "if (err instanceof LeaseMismatch) { const s: number | null = err.status; void s; }",
      "void e; void m;",
      "// @ts-expect-error: unknown option",
      'void c.enqueue("q", "p", { dealy_ms: 1 });',
      "",
    ].join("\n"),
  );
  // The declarations use Web types (fetch, AbortSignal) that either the
  // DOM lib or @types/node provides: check a browser-style and a
  // Node-style consumer.
  const base = { strict: true, noEmit: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022" };
  const consumers = {
    "with the DOM lib": { ...base, lib: ["es2022", "dom"], types: [] },
    "with @types/node, no DOM": {
      ...base,
      lib: ["es2022"],
      types: ["node"],
      typeRoots: [join(PACKAGE_DIR, "node_modules", "@types")],
    },
  };
  const tsc = join(PACKAGE_DIR, "node_modules", "typescript", "bin", "tsc");
  for (const [what, compilerOptions] of Object.entries(consumers)) {
    writeFileSync(join(consumer, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["use.ts"] }));
    try {
      execFileSync(process.execPath, [tsc, "-p", "."], { cwd: consumer, encoding: "utf8", stdio: "pipe" });
    } catch (err) {
      assert.fail(`tsc ${what} failed:\n${(err as { stdout?: string }).stdout ?? String(err)}`);
    }
  }
});

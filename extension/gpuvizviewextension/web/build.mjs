// Builds the page into dist/ (or --out DIR): index.html, assets/app.js,
// assets/app.css and THIRD_PARTY.md. The output depends only on the sources
// and the pinned packages (no timestamps, no paths), so `make web-check`
// can rebuild into a temporary directory and compare with what is committed.
import * as esbuild from "esbuild";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const oi = args.indexOf("--out");
const out = path.resolve(oi >= 0 ? args[oi + 1] : path.join(here, "dist"));

fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(path.join(out, "assets"), { recursive: true });
await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.js" },
  outdir: path.join(out, "assets"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  legalComments: "eof",
  charset: "utf8",
  sourcemap: false,
  logLevel: "warning",
});
fs.copyFileSync(path.join(here, "src/index.html"), path.join(out, "index.html"));

const pkg = JSON.parse(fs.readFileSync(path.join(here, "node_modules/uplot/package.json"), "utf8"));
const lic = fs.readFileSync(path.join(here, "node_modules/uplot/LICENSE"), "utf8").trim();
const esb = JSON.parse(fs.readFileSync(path.join(here, "node_modules/esbuild/package.json"), "utf8"));
fs.writeFileSync(path.join(out, "THIRD_PARTY.md"), `# Third-party code in these assets

assets/app.js and assets/app.css bundle, unmodified:

- **${pkg.name} ${pkg.version}** (${pkg.license}), ${pkg.homepage || "https://github.com/leeoniya/uPlot"},
  from npm, pinned in package.json and package-lock.json.

Built with esbuild ${esb.version} (not shipped). The rest is gpuviz's own code (Apache-2.0), from ../src.

## ${pkg.name} license

\`\`\`
${lic}
\`\`\`
`);
console.log(`built ${path.relative(process.cwd(), out) || "."}`);

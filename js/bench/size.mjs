// The npm package's size, and what its WebAssembly is made of.
//
//     REBOUND_WASM_PROFILE=wasm bash js/build.sh      # the release build (profile `wasm`)
//     node js/bench/size.mjs [names.wasm]
//
// Prints the shipped files raw, gzipped (level 9) and brotli'd (11, as CDNs serve them), the .wasm's
// sections by size, and its code by crate and its largest functions. The shipped .wasm has
// no name section (build.sh removes it), so function names are read from `names.wasm`:
// by default the same build before wasm-bindgen, $CARGO_TARGET_DIR (or target/)
// /wasm32-unknown-unknown/wasm/rebound_js.wasm, whose functions carry their Rust names
// (wasm-bindgen adds a few and drops none of the Rust code, so the shares are the same).

import { readFileSync } from "node:fs";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";
import { join } from "node:path";

const js = fileURLToPath(new URL("..", import.meta.url));
const root = join(js, "..");
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;

function shipped() {
  const files = ["pkg/rebound_bg.wasm", "pkg/rebound.js", ...["errors", "load", "machine", "index", "wire", "budget", "sim"].map((m) => `lib/${m}.js`)];
  let raw = 0;
  let gz = 0;
  let br = 0;
  console.log("file                      raw          gzip -9      brotli -11");
  for (const f of files) {
    let bytes;
    try {
      bytes = readFileSync(join(js, f));
    } catch {
      continue;
    }
    const z = gzipSync(bytes, { level: 9 }).length;
    const b = brotliCompressSync(bytes, { params: { [constants.BROTLI_PARAM_QUALITY]: 11 } }).length;
    raw += bytes.length;
    gz += z;
    br += b;
    console.log(`${f.padEnd(24)} ${kib(bytes.length).padStart(11)}  ${kib(z).padStart(11)}  ${kib(b).padStart(11)}`);
  }
  console.log(`${"all".padEnd(24)} ${kib(raw).padStart(11)}  ${kib(gz).padStart(11)}  ${kib(br).padStart(11)}`);
}

/** A LEB128 reader over `bytes`. */
function reader(bytes) {
  let pos = 0;
  const r = {
    get pos() {
      return pos;
    },
    set pos(p) {
      pos = p;
    },
    u32() {
      let result = 0;
      let shift = 0;
      for (;;) {
        const b = bytes[pos++];
        result += (b & 0x7f) * 2 ** shift;
        if ((b & 0x80) === 0) return result;
        shift += 7;
      }
    },
    name() {
      const n = r.u32();
      const s = new TextDecoder().decode(bytes.subarray(pos, pos + n));
      pos += n;
      return s;
    },
  };
  return r;
}

const SECTIONS = ["custom", "type", "import", "function", "table", "memory", "global", "export", "start", "element", "code", "data", "data count"];

/** The sections of a module: id, name, size, start of the payload. */
function sections(bytes) {
  const r = reader(bytes);
  r.pos = 8;
  const out = [];
  while (r.pos < bytes.length) {
    const id = bytes[r.pos];
    r.pos += 1;
    const size = r.u32();
    const start = r.pos;
    let name = SECTIONS[id] ?? `#${id}`;
    if (id === 0) name = `custom "${r.name()}"`;
    out.push({ id, name, size, start });
    r.pos = start + size;
  }
  return out;
}

/** The body size of each defined function, by index (imported functions come first). */
function functionSizes(bytes) {
  const all = sections(bytes);
  const imports = all.find((s) => s.id === 2);
  let imported = 0;
  if (imports) {
    const r = reader(bytes);
    r.pos = imports.start;
    const n = r.u32();
    for (let i = 0; i < n; i++) {
      r.name();
      r.name();
      const kind = bytes[r.pos++];
      if (kind === 0) {
        imported += 1;
        r.u32();
      } else if (kind === 1) {
        r.pos += 1;
        const flags = r.u32();
        r.u32();
        if (flags & 1) r.u32();
      } else if (kind === 2) {
        const flags = r.u32();
        r.u32();
        if (flags & 1) r.u32();
      } else if (kind === 3) {
        r.pos += 2;
      } else {
        r.u32();
      }
    }
  }
  const code = all.find((s) => s.id === 10);
  const r = reader(bytes);
  r.pos = code.start;
  const n = r.u32();
  const sizes = [];
  for (let i = 0; i < n; i++) {
    const size = r.u32();
    sizes.push({ index: imported + i, size: size + 1 });
    r.pos += size;
  }
  return sizes;
}

/** Function names from the `name` section, by index. */
function names(bytes) {
  const name = sections(bytes).find((s) => s.name === 'custom "name"');
  const out = new Map();
  if (name === undefined) return out;
  const r = reader(bytes);
  r.pos = name.start;
  r.name();
  while (r.pos < name.start + name.size) {
    const sub = bytes[r.pos];
    r.pos += 1;
    const size = r.u32();
    const end = r.pos + size;
    if (sub === 1) {
      const count = r.u32();
      for (let i = 0; i < count; i++) {
        const index = r.u32();
        out.set(index, r.name());
      }
    }
    r.pos = end;
  }
  return out;
}

/**
 * A Rust symbol made readable: legacy `_ZN…E` mangling (most of them) decoded, the few
 * v0-mangled ones (`_RNv…4core3num…`) as their identifiers joined by `::`.
 */
function demangle(symbol) {
  if (symbol.startsWith("_ZN")) {
    const parts = [];
    let i = 3;
    while (i < symbol.length && symbol[i] !== "E") {
      let j = i;
      while (/[0-9]/.test(symbol[j])) j++;
      const n = Number(symbol.slice(i, j));
      if (!n) break;
      parts.push(symbol.slice(j, j + n));
      i = j + n;
    }
    if (parts.length > 0 && /^h[0-9a-f]{16}$/.test(parts.at(-1))) parts.pop();
    return parts
      .join("::")
      .replace(/^_\$/, "$")
      .replaceAll("$LT$", "<")
      .replaceAll("$GT$", ">")
      .replaceAll("$u20$", " ")
      .replaceAll("$RF$", "&")
      .replaceAll("$C$", ",")
      .replaceAll("$u7b$", "{")
      .replaceAll("$u7d$", "}")
      .replaceAll("..", "::");
  }
  if (symbol.startsWith("_R")) {
    // Drop the crates' hashes and the disambiguators (`Cs<base62>_`, `Ms0_`) first.
    symbol = symbol.replace(/([CM])s[0-9A-Za-z]*_/g, "$1");
    const idents = [];
    const re = /(\d+)(_?)([A-Za-z_][A-Za-z0-9_]*)/g;
    for (let m = re.exec(symbol); m !== null; m = re.exec(symbol)) {
      const n = Number(m[1]);
      if (n > 1 && m[3].length >= n && m.index > 0 && /[A-Za-z_]/.test(symbol[m.index - 1])) {
        idents.push(m[3].slice(0, n));
        re.lastIndex = m.index + m[1].length + m[2].length + n;
      } else {
        re.lastIndex = m.index + m[1].length;
      }
    }
    return idents.length > 0 ? idents.join("::") : symbol;
  }
  // wasm-bindgen's output names functions demangled, with the crates' and the symbols' hashes.
  return symbol.replace(/\[[0-9a-f]{16}\]/g, "").replace(/::h[0-9a-f]{16}$/, "");
}

/**
 * The crate a function's code belongs to, as far as its name tells: a path's first segment;
 * for `<impl Trait for T>` and `<T as Trait>`, T's crate (its derived or generic code).
 */
function crate(name) {
  const path = demangle(name);
  const impl = /^<impl .*? for (?:&(?:mut )?)?([A-Za-z_][A-Za-z0-9_]*)/.exec(path);
  if (impl) return impl[1];
  const m = /^<?(?:&(?:mut )?)?([A-Za-z_][A-Za-z0-9_]*)/.exec(path);
  return m ? m[1] : "(unnamed)";
}

function composition(shippedWasm, namedWasm) {
  const bytes = readFileSync(shippedWasm);
  console.log(`\n${shippedWasm}: sections`);
  for (const s of sections(bytes).sort((a, b) => b.size - a.size)) {
    console.log(`  ${s.name.padEnd(30)} ${kib(s.size).padStart(11)}  ${((100 * s.size) / bytes.length).toFixed(1).padStart(5)} %`);
  }
  let named;
  try {
    named = readFileSync(namedWasm);
  } catch {
    console.log(`\n(no ${namedWasm}: no function names)`);
    return;
  }
  const fnNames = names(named);
  const sizes = functionSizes(named);
  const total = sizes.reduce((a, f) => a + f.size, 0);
  const byCrate = new Map();
  for (const f of sizes) {
    const c = crate(fnNames.get(f.index) ?? "");
    byCrate.set(c, (byCrate.get(c) ?? 0) + f.size);
  }
  console.log(`\ncode by crate (${sizes.length} functions, ${kib(total)}; names from ${namedWasm})`);
  for (const [c, size] of [...byCrate].sort((a, b) => b[1] - a[1]).slice(0, 15)) {
    console.log(`  ${c.padEnd(30)} ${kib(size).padStart(11)}  ${((100 * size) / total).toFixed(1).padStart(5)} %`);
  }
  // The JSON (de)serialization, wherever its code lives: serde's crates, and the derived
  // Serialize / Deserialize impls and visitors in every other crate.
  const serdeCode = sizes
    .filter((f) => /serde|Deserializ|Serializ|[vV]isit/.test(demangle(fnNames.get(f.index) ?? "")))
    .reduce((a, f) => a + f.size, 0);
  console.log(`  JSON (de)serialization, all crates: ${kib(serdeCode)} (${((100 * serdeCode) / total).toFixed(1)} %)`);
  const contentCode = sizes
    .filter((f) => /serde::private::de::content|Content(Ref)?Deserializer|FlatMap/.test(demangle(fnNames.get(f.index) ?? "")))
    .reduce((a, f) => a + f.size, 0);
  console.log(`  of which serde's buffering of tagged and flattened values (Content): ${kib(contentCode)} (${((100 * contentCode) / total).toFixed(1)} %)`);
  // rebound's own crates by module (two levels: `rebound_core::wire::gemini`).
  const byModule = new Map();
  for (const f of sizes) {
    const path = demangle(fnNames.get(f.index) ?? "");
    const m = /^(rebound_\w+)::(\w+)(?:::(\w+))?/.exec(path.replace(/^<(?:impl .*? for )?/, ""));
    if (m === null) continue;
    const key = m[2] === "wire" && m[3] && /^[a-z_]+$/.test(m[3]) ? `${m[1]}::wire::${m[3]}` : `${m[1]}::${m[2]}`;
    byModule.set(key, (byModule.get(key) ?? 0) + f.size);
  }
  console.log("\nrebound's crates by module");
  for (const [m, size] of [...byModule].sort((a, b) => b[1] - a[1]).slice(0, 20)) {
    console.log(`  ${m.padEnd(40)} ${kib(size).padStart(11)}  ${((100 * size) / total).toFixed(1).padStart(5)} %`);
  }
  const encoders = sizes
    .filter((f) => /^rebound_core::wire::.*encode/.test(demangle(fnNames.get(f.index) ?? "")))
    .reduce((a, f) => a + f.size, 0);
  console.log(`  core's wire encoders of what providers send (functions named *encode*): ${kib(encoders)} (${((100 * encoders) / total).toFixed(1)} %)`);
  console.log("\nlargest functions");
  for (const f of [...sizes].sort((a, b) => b.size - a.size).slice(0, 15)) {
    console.log(`  ${kib(f.size).padStart(9)}  ${demangle(fnNames.get(f.index) ?? `#${f.index}`).slice(0, 110)}`);
  }
}

const target = process.env.CARGO_TARGET_DIR ?? join(root, "target");
shipped();
composition(join(js, "pkg/rebound_bg.wasm"), process.argv[2] ?? join(target, "wasm32-unknown-unknown/wasm/rebound_js.wasm"));

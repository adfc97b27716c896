#!/usr/bin/env node
// rig's tool gate: a shell command that deletes files is blocked unless it is confirmed.
//
// One file, two harnesses (docs/tool-gate.md):
// - Pi loads it with `--extension`: its default export blocks a `bash` tool call on `tool_call`.
// - Claude Code runs it as a PreToolUse hook command: it reads the hook's JSON on stdin and exits 2
//   with the reason on stderr, which blocks the call and shows the reason to the model.
//
// v1 (this file, delete_gate.mjs): a deleting command (rm, rmdir, unlink, shred, find -delete or
//   -exec rm, xargs rm, git rm, git clean, a script calling rmtree/unlink/rmSync...) needs the
//   prefix RIG_CONFIRM_DELETE=1 on that command.
// v2 (the same file named delete_gate_v2.mjs): deletions must name their paths. Only rm, rmdir,
//   unlink and git rm of literal paths pass, and only when RIG_CONFIRM_DELETE lists every one of
//   them: RIG_CONFIRM_DELETE="tmp scratch" rm -r tmp scratch. Pattern deletes (globs, find, xargs,
//   git clean, scripts) are blocked, confirmed or not.
//
// No network, no dependencies: node's standard library only, so it starts in milliseconds.

import { readFileSync, realpathSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";

const MARKER = "RIG_CONFIRM_DELETE";
const SELF = fileURLToPath(import.meta.url);
const VERSION = basename(SELF).includes("_v2") ? 2 : 1;
const NAMED = new Set(["rm", "rmdir", "unlink", "shred"]);
const WRAPPERS = new Set(["sudo", "command", "builtin", "exec", "nice", "nohup", "time", "env"]);
const SHELLS = new Set(["sh", "bash", "dash", "zsh"]);
const SCRIPT_DELETES = /rmtree|os\.remove|os\.unlink|\.unlink\(|os\.rmdir|rmSync|unlinkSync|rmdirSync|File\.delete/;
const GLOB = /[*?[\]{}$`]/;

// Split a command line into simple commands (arrays of words): quotes are honoured, operators
// (; & | && || newline) and parentheses end a command, $(...) and `...` bodies are checked as
// command lines of their own.
function simpleCommands(line) {
  const commands = [];
  const nested = [];
  let words = [];
  let word = null;
  const flushWord = () => {
    if (word !== null) words.push(word);
    word = null;
  };
  const flushCommand = () => {
    flushWord();
    if (words.length) commands.push(words);
    words = [];
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      const stop = end < 0 ? line.length : end;
      word = (word ?? "") + line.slice(i + 1, stop);
      i = stop;
    } else if (c === '"') {
      let j = i + 1;
      let text = "";
      while (j < line.length && line[j] !== '"') {
        if (line[j] === "\\" && j + 1 < line.length) j++;
        text += line[j];
        j++;
      }
      nested.push(...substitutions(text));
      word = (word ?? "") + text;
      i = j;
    } else if (c === "\\" && i + 1 < line.length) {
      word = (word ?? "") + line[i + 1];
      i++;
    } else if (c === "$" && line[i + 1] === "(") {
      const end = closing(line, i + 1);
      nested.push(line.slice(i + 2, end));
      word = (word ?? "") + line.slice(i, end + 1);
      i = end;
    } else if (c === "`") {
      const end = line.indexOf("`", i + 1);
      const stop = end < 0 ? line.length : end;
      nested.push(line.slice(i + 1, stop));
      word = (word ?? "") + line.slice(i, stop + 1);
      i = stop;
    } else if (";&|\n()".includes(c)) {
      flushCommand();
    } else if (c === " " || c === "\t") {
      flushWord();
    } else if (c === "#" && word === null) {
      const end = line.indexOf("\n", i);
      i = end < 0 ? line.length : end - 1;
    } else {
      word = (word ?? "") + c;
    }
  }
  flushCommand();
  return [...commands, ...nested.flatMap(simpleCommands)];
}

function closing(line, open) {
  let depth = 0;
  for (let i = open; i < line.length; i++) {
    if (line[i] === "(") depth++;
    if (line[i] === ")" && --depth === 0) return i;
  }
  return line.length;
}

function substitutions(text) {
  const found = [];
  for (let i = text.indexOf("$("); i >= 0; i = text.indexOf("$(", i + 1)) {
    found.push(text.slice(i + 2, closing(text, i + 1)));
  }
  return found;
}

const isAssignment = (word) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(word);
const clean = (path) => path.replace(/^\.\//, "").replace(/\/+$/, "") || ".";

// What one simple command deletes: null (nothing), or { tool, paths, confirm, pattern } where
// `paths` are the literal paths it names and `pattern` says it deletes what a pattern matches.
function deletion(words) {
  let confirm = null;
  let i = 0;
  for (; i < words.length && isAssignment(words[i]); i++) {
    const [name, ...value] = words[i].split("=");
    if (name === MARKER) confirm = value.join("=");
  }
  while (i < words.length && WRAPPERS.has(basename(words[i]))) {
    i++;
    while (i < words.length && (words[i].startsWith("-") || isAssignment(words[i]))) i++;
  }
  if (i >= words.length) return null;
  const tool = basename(words[i]);
  const args = words.slice(i + 1);
  const operands = (list) => {
    const dash = list.indexOf("--");
    const before = dash < 0 ? list : list.slice(0, dash);
    return [...before.filter((a) => !a.startsWith("-")), ...(dash < 0 ? [] : list.slice(dash + 1))];
  };
  if (NAMED.has(tool)) {
    const paths = operands(args);
    return { tool, paths, confirm, pattern: paths.some((p) => GLOB.test(p)) };
  }
  if (tool === "git" && args[0] === "rm") return { tool: "git rm", paths: operands(args.slice(1)), confirm, pattern: false };
  if (tool === "git" && args[0] === "clean") return { tool: "git clean", paths: [], confirm, pattern: true };
  if (tool === "find" && args.includes("-delete")) return { tool: "find -delete", paths: [], confirm, pattern: true };
  if (tool === "find" || tool === "xargs") {
    const runs = args.some((a) => NAMED.has(basename(a)));
    if (runs) return { tool: `${tool} rm`, paths: [], confirm, pattern: true };
  }
  if (SHELLS.has(tool)) {
    const script = args[args.indexOf("-c") + 1];
    if (args.includes("-c") && script !== undefined) {
      const inner = simpleCommands(script).map(deletion).find(Boolean);
      if (inner) return { ...inner, confirm: inner.confirm ?? confirm };
    }
    return null;
  }
  if (words.slice(i).some((a) => SCRIPT_DELETES.test(a))) return { tool: `${tool} script`, paths: [], confirm, pattern: true };
  return null;
}

const V1_HOW = `prefix that command with ${MARKER}=1, e.g. \`${MARKER}=1 rm -r build/tmp\``;
const V2_HOW =
  `use rm or rmdir on literal paths (no globs, find, xargs, git clean or scripts) and list ` +
  `every path in the confirmation, e.g. \`${MARKER}="build/tmp scratch" rm -r build/tmp scratch\``;

/** Why `command` is blocked under gate `version` (1 or 2); null when it may run. */
export function verdict(command, version = VERSION) {
  for (const words of simpleCommands(command)) {
    const found = deletion(words);
    if (!found) continue;
    const what = `rig tool gate v${version}: \`${words.join(" ")}\` deletes files (${found.tool})`;
    if (version === 1) {
      if (found.confirm) continue;
      return `${what} without confirmation. Deleting needs an explicit confirmation: ${V1_HOW}. Check first that nothing still uses what you delete.`;
    }
    if (found.pattern || found.paths.length === 0) {
      return `${what} by pattern, which gate v2 never allows. To delete, ${V2_HOW}.`;
    }
    const listed = new Set((found.confirm ?? "").split(/[\s,]+/).filter(Boolean).map(clean));
    const missing = found.paths.map(clean).filter((p) => !listed.has(p));
    if (missing.length) {
      return `${what}; not confirmed: ${missing.join(", ")}. To delete, ${V2_HOW}. Check first that nothing still uses what you delete.`;
    }
  }
  return null;
}

/** Pi's entry point: block a bash tool call that deletes without confirmation. */
export default function (pi) {
  pi.on("tool_call", async (event) => {
    if (event.toolName !== "bash") return undefined;
    const reason = verdict(String(event.input?.command ?? ""));
    return reason ? { block: true, reason } : undefined;
  });
}

function invokedDirectly() {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(SELF);
  } catch {
    return false;
  }
}

// Claude Code's PreToolUse hook: {"tool_name": "Bash", "tool_input": {"command": ...}} on stdin.
if (invokedDirectly()) {
  let reason = null;
  try {
    const call = JSON.parse(readFileSync(0, "utf8"));
    if (call.tool_name === "Bash") reason = verdict(String(call.tool_input?.command ?? ""));
  } catch (error) {
    reason = `rig tool gate: unreadable hook input (${error.message}); the call is blocked`;
  }
  if (reason) {
    process.stderr.write(`${reason}\n`);
    process.exit(2);
  }
}

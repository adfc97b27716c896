// Hidden tests for t4_split_constant: two constants, each used where it belongs, the old name gone.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { createClient } from "notesapp/client.mjs";
// A namespace import: a missing export is undefined here, not a load error for the whole file.
import * as constants from "notesapp/constants.mjs";
import { listNotebookNotes, listNotebooks } from "notesapp/services/notebook-service.mjs";
import { listNotes } from "notesapp/services/note-service.mjs";
import { searchNotes } from "notesapp/services/search-service.mjs";
import { Repository } from "notesapp/storage/repository.mjs";
import { buildSeededStore } from "notesapp/storage/seed.mjs";
import { paginate, parsePageArgs } from "notesapp/utils/pagination.mjs";

const ROOT = fileURLToPath(new URL("../", import.meta.resolve("notesapp/index.mjs")));

function sourceFiles(dir) {
  return readdirSync(path.join(ROOT, dir), { recursive: true })
    .filter((name) => name.endsWith(".mjs"))
    .map((name) => path.join(dir, name));
}

describe("split_constant_hidden", () => {
  test("new_constant_values", () => {
    assert.equal(constants.LIST_PAGE_SIZE, 25);
    assert.equal(constants.SEARCH_PAGE_SIZE, 10);
  });

  test("old_name_is_gone_everywhere", () => {
    assert.equal(constants.DEFAULT_PAGE_SIZE, undefined);
    const users = [...sourceFiles("src"), ...sourceFiles("bin")].filter((file) =>
      readFileSync(path.join(ROOT, file), "utf8").includes("DEFAULT_PAGE_SIZE"),
    );
    assert.deepEqual(users, []);
  });

  test("list_endpoints_use_list_size", () => {
    const client = createClient();
    for (const url of ["/notes", "/notebooks", "/notebooks/1/notes"]) {
      const page = client.get(url).json;
      assert.equal(page.page_size, 25, url);
      assert.equal(page.items.length, Math.min(25, page.total), url);
    }
  });

  test("search_uses_search_size", () => {
    const page = createClient().get("/search", { q: "seeded" }).json;
    assert.equal(page.page_size, 10);
    assert.equal(page.items.length, 10);
    assert.equal(page.total, 45);
    assert.equal(page.has_next, true);
  });

  test("service_defaults", () => {
    const repo = new Repository(buildSeededStore());
    assert.equal(listNotes(repo).page_size, 25);
    assert.equal(listNotebooks(repo).page_size, 25);
    assert.equal(listNotebookNotes(repo, 1).page_size, 25);
    assert.equal(searchNotes(repo, "seeded").page_size, 10);
    assert.equal(paginate(Array.from({ length: 30 }, (_, i) => i)).page_size, 25);
    assert.equal(parsePageArgs({}).pageSize, 25);
  });
});

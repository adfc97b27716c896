// Hidden tests for t1_fix_pagination: has_next is exact for every size, through the API too.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { createClient } from "notesapp/client.mjs";
import { paginate } from "notesapp/utils/pagination.mjs";

const range = (n) => Array.from({ length: n }, (_, i) => i);

describe("pagination_hidden", () => {
  test("exact_multiple_last_page", () => {
    const page = paginate(range(40), 2, 20);
    assert.deepEqual(page.items, range(40).slice(20));
    assert.equal(page.has_next, false);
  });

  test("has_next_matches_remaining_items", () => {
    for (let total = 0; total <= 30; total++) {
      const items = range(total);
      for (let size = 1; size < 8; size++) {
        for (let number = 1; number < Math.floor(total / size) + 3; number++) {
          const page = paginate(items, number, size);
          assert.deepEqual(page.items, items.slice((number - 1) * size, number * size));
          assert.equal(page.has_next, number * size < total, `total ${total} size ${size} page ${number}`);
        }
      }
    }
  });

  test("api_last_page_has_no_next", () => {
    const client = createClient();
    assert.equal(client.get("/notes", { page: 2, page_size: 15 }).json.has_next, true);
    const last = client.get("/notes", { page: 3, page_size: 15 }).json;
    assert.equal(last.items.length, 15);
    assert.equal(last.has_next, false);
  });

  test("notebook_notes_last_page_has_no_next", () => {
    const client = createClient();
    assert.equal(client.get("/notebooks/1/notes", { page: 1, page_size: 10 }).json.has_next, true);
    const last = client.get("/notebooks/1/notes", { page: 3, page_size: 10 }).json;
    assert.deepEqual(
      last.items.map((note) => note.notebook_id),
      Array(10).fill(1),
    );
    assert.equal(last.has_next, false);
  });
});

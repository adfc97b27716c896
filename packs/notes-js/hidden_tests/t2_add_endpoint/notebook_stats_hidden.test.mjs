// Hidden tests for t2_add_endpoint: the stats follow the data, for every notebook, and the
// unknown notebook is the app's 404.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { createClient } from "notesapp/client.mjs";

const stats = (client, id) => client.get(`/notebooks/${id}/stats`);

describe("notebook_stats_hidden", () => {
  test("stats_follow_pin_and_tag_changes", () => {
    const client = createClient();
    assert.equal(client.patch("/notes/31", { pinned: true }).status, 200);
    assert.equal(client.patch("/notes/33", { pinned: true, tags: [] }).status, 200);
    const response = stats(client, 2);
    assert.equal(response.status, 200);
    assert.deepEqual(response.json, { notebook_id: 2, total: 12, pinned: 2, untagged: 4 });
  });

  test("stats_count_new_and_deleted_notes", () => {
    const client = createClient();
    const before = stats(client, 3).json;
    assert.deepEqual(before, { notebook_id: 3, total: 3, pinned: 0, untagged: 1 });
    assert.equal(client.post("/notes", { notebook_id: 3, title: "Old invoices", pinned: true }).status, 201);
    assert.equal(client.delete("/notes/43", { user_id: 1 }).status, 200);
    assert.deepEqual(stats(client, 3).json, { notebook_id: 3, total: 3, pinned: 1, untagged: 2 });
  });

  test("stats_for_new_empty_notebook", () => {
    const client = createClient();
    const created = client.post("/notebooks", { name: "Travel", owner_id: 2 }).json;
    assert.deepEqual(stats(client, created.id).json, { notebook_id: created.id, total: 0, pinned: 0, untagged: 0 });
    client.post("/notes", { notebook_id: created.id, title: "Passport", tags: ["trip"] });
    assert.deepEqual(stats(client, created.id).json, { notebook_id: created.id, total: 1, pinned: 0, untagged: 0 });
  });

  test("stats_unknown_notebook_is_404", () => {
    const response = stats(createClient(), 404404);
    assert.equal(response.status, 404);
    assert.equal(response.json.error.code, "NOTEBOOK_NOT_FOUND");
  });
});

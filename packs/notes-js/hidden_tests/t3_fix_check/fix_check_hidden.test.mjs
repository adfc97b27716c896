// Hidden tests for t3_fix_check: the gate passes AND the behaviour it guards is intact.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { createClient } from "notesapp/client.mjs";
import { NotFoundError } from "notesapp/errors.mjs";
import { getUser } from "notesapp/services/user-service.mjs";
import { Repository } from "notesapp/storage/repository.mjs";
import { buildSeededStore } from "notesapp/storage/seed.mjs";

describe("fix_check_hidden", () => {
  test("unknown_user_is_404_with_code", () => {
    const response = createClient().get("/users/404404");
    assert.equal(response.status, 404);
    assert.equal(response.json.error.code, "USER_NOT_FOUND");
  });

  test("service_throws_not_found", () => {
    const repo = new Repository(buildSeededStore());
    assert.throws(
      () => getUser(repo, 404404),
      (error) => error instanceof NotFoundError && error.code === "USER_NOT_FOUND",
    );
  });

  test("delete_by_unknown_user_is_404", () => {
    const response = createClient().delete("/notes/2", { user_id: 404404 });
    assert.equal(response.status, 404);
    assert.equal(response.json.error.code, "USER_NOT_FOUND");
  });

  test("body_at_limit_is_accepted", () => {
    const response = createClient().post("/notes", { notebook_id: 1, title: "Edge", body: "b".repeat(5000) });
    assert.equal(response.status, 201);
    assert.equal(response.json.body.length, 5000);
  });

  test("body_over_limit_is_rejected", () => {
    const response = createClient().patch("/notes/3", { body: "b".repeat(5001) });
    assert.equal(response.status, 422);
    assert.equal(response.json.error.code, "BODY_TOO_LONG");
  });
});

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import semver from "semver";
import { nextMinor } from "../src/bump.js";

describe("bump_hidden", () => {
  test("next_minor", () => {
    assert.equal(nextMinor("1.2.3"), "1.3.0");
    assert.equal(nextMinor("0.9.9"), "0.10.0");
    assert.ok(semver.valid(nextMinor("2.0.0")));
  });
});

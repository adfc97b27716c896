const assert = require("node:assert/strict");
const { clamp } = require("../src/clamp");

describe("clamp_hidden", () => {
  it("holds a value above at high", () => {
    assert.equal(clamp(11, 0, 10), 10);
  });
  it("holds a value below at low", () => {
    assert.equal(clamp(-1, 0, 10), 0);
  });
});

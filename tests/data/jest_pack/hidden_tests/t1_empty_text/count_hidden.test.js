const { countWords } = require("../src/count");

describe("count_hidden", () => {
  test("empty text has no words", () => {
    expect(countWords("")).toBe(0);
  });
  test("punctuation only has no words", () => {
    expect(countWords("?! ...")).toBe(0);
  });
});

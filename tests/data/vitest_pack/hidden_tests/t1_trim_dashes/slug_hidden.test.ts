import { describe, expect, test } from "vitest";
import { slugify } from "../src/slug";

describe("slug_hidden", () => {
  test("no dash at either end", () => {
    expect(slugify("  Hello, World! ")).toBe("hello-world");
  });
  test("punctuation only is empty", () => {
    expect(slugify("?!")).toBe("");
  });
});

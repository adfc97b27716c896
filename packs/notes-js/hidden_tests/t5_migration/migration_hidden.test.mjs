// Hidden tests for t5_migration: every step of the procedure in docs/migrations.md was done,
// the migration is correct both ways, and the API speaks the new field.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { createClient } from "notesapp/client.mjs";
// Namespace imports: a missing export is undefined here, not a load error for the whole file.
import * as models from "notesapp/models.generated.mjs";
import * as migrate from "notesapp/storage/migrate.mjs";
import { buildSeededStore } from "notesapp/storage/seed.mjs";

const ROOT = new URL("../", import.meta.resolve("notesapp/index.mjs"));
const read = (rel) => readFileSync(new URL(rel, ROOT), "utf8");
const NEW_VERSION = 3;
const COLORS = ["yellow", "green", "blue", "pink"];

function newestMigration() {
  const newest = migrate.MIGRATIONS.at(-1);
  assert.equal(newest.VERSION, NEW_VERSION, "the newest migration in INDEX is not version 3");
  return newest;
}

describe("migration_hidden", () => {
  test("index_lists_the_new_migration", () => {
    const names = migrate.loadIndex();
    assert.equal(names.length, NEW_VERSION);
    assert.deepEqual(names.slice(0, 2), ["0001_initial", "0002_add_pinned"]);
    assert.match(names[2], /^0003_\w+$/);
    const migration = newestMigration();
    assert.equal(migration.name, names[2]);
    assert.equal(migration.TABLE, "notes");
  });

  test("schema_version_bumped_everywhere", () => {
    assert.equal(JSON.parse(read("schema/models.json")).version, NEW_VERSION);
    assert.equal(models.SCHEMA_VERSION, NEW_VERSION);
    assert.equal(newestMigration().VERSION, NEW_VERSION);
    assert.equal(createClient().get("/health").json.schema_version, NEW_VERSION);
  });

  test("generated_model_comes_from_the_schema", async () => {
    const gen = await import(new URL("scripts/gen-models.mjs", ROOT).href);
    const schemaText = read("schema/models.json");
    const schema = JSON.parse(schemaText);
    const color = schema.models.Note.fields.find((field) => field.name === "color");
    assert.ok(color, "schema/models.json has no Note.color");
    assert.equal(color.default, null);
    const moduleText = gen.render(schema);
    assert.equal(read("src/models.generated.mjs"), moduleText);
    assert.equal(read("schema/models.lock"), gen.renderLock(schemaText, moduleText));
    assert.equal(models.Note.build({ id: 1, notebook_id: 1, title: "t" }).color, null);
  });

  test("up_adds_default_and_keeps_existing_values", () => {
    const { up } = newestMigration();
    const record = { id: 1, notebook_id: 1, title: "t", body: "", tags: [], pinned: false };
    const snapshot = structuredClone(record);
    assert.deepEqual(up(record), { ...snapshot, color: null });
    assert.deepEqual(record, snapshot, "up changed the record it was given");
    assert.equal(up({ ...record, color: "blue" }).color, "blue");
  });

  test("down_removes_only_the_new_field", () => {
    const { down } = newestMigration();
    const record = { id: 1, notebook_id: 1, title: "t", body: "b", tags: ["x"], pinned: true, color: "pink" };
    const snapshot = structuredClone(record);
    const { color, ...rest } = snapshot;
    assert.equal(color, "pink");
    assert.deepEqual(down(record), rest);
    assert.deepEqual(record, snapshot, "down changed the record it was given");
  });

  test("seed_migrates_up_and_rolls_back", () => {
    const store = buildSeededStore();
    assert.equal(store.schemaVersion, NEW_VERSION);
    const notes = [...store.tables.notes.values()];
    assert.ok(notes.every((note) => note.color === null));
    migrate.rollback(store, NEW_VERSION - 1);
    assert.equal(store.schemaVersion, NEW_VERSION - 1);
    assert.ok([...store.tables.notes.values()].every((note) => !("color" in note) && "pinned" in note));
    migrate.migrate(store);
    assert.deepEqual([...store.tables.notes.values()], notes);
  });

  test("api_creates_reads_and_updates_color", () => {
    const client = createClient();
    const created = client.post("/notes", { notebook_id: 1, title: "Colourful", color: "green" });
    assert.equal(created.status, 201);
    assert.equal(created.json.color, "green");
    assert.equal(client.get(`/notes/${created.json.id}`).json.color, "green");
    assert.equal(client.post("/notes", { notebook_id: 1, title: "Plain" }).json.color, null);
    assert.equal(client.patch("/notes/5", { color: "pink" }).json.color, "pink");
    assert.equal(client.get("/notes/5").json.color, "pink");
    assert.equal(client.patch("/notes/5", { color: null }).json.color, null);
  });

  test("api_lists_color_and_rejects_bad_colors", () => {
    const client = createClient();
    client.patch("/notes/1", { color: "yellow" });
    const listed = client.get("/notes", { page_size: 3 }).json.items;
    assert.deepEqual(
      listed.map((note) => note.color),
      ["yellow", null, null],
    );
    assert.equal(client.get("/search", { q: "seeded", page_size: 1 }).json.items[0].color, "yellow");
    assert.equal(client.get("/notebooks/1/notes", { page_size: 1 }).json.items[0].color, "yellow");
    for (const bad of ["purple", "", 3, ["blue"], "Blue"]) {
      const response = client.patch("/notes/2", { color: bad });
      assert.equal(response.status, 422, JSON.stringify(bad));
      assert.equal(response.json.error.code, "INVALID_COLOR");
    }
    assert.equal(client.post("/notes", { notebook_id: 1, title: "x", color: "red" }).json.error.code, "INVALID_COLOR");
    assert.ok(COLORS.every((c) => client.patch("/notes/2", { color: c }).json.color === c));
  });
});

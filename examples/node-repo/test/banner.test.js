"use strict";

const assert = require("node:assert/strict");
const { test } = require("node:test");
const { banner } = require("..");

test("banner centres the title in dashes", () => {
  assert.equal(banner("hi", 10), "--- HI ---");
});

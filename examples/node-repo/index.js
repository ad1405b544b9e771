"use strict";

const { padBoth } = require("tinypad");

/** `title` upper-cased and centred in a line of `width` dashes. */
function banner(title, width = 40) {
  return padBoth(` ${title.toUpperCase()} `, width, "-");
}

module.exports = { banner };

// Package reporttest checks rendered markdown reports in the tests of the
// benchmark commands. A report test names the lines a reader relies on
// rather than comparing whole documents, so that a change of wording
// elsewhere does not fail it.
package reporttest

// Package statuspage holds the browser test of flight-sink's /status page: a server started in
// the test process takes two epochs through a real Flight client, then headless Chromium
// (Debian's chromium package) renders the page, and the test checks the DOM the browser built
// and the screenshot it took.
//
// The package has no code of its own. It is a package so that its test runs in a process of its
// own (metrics are process-wide) and can be run alone:
//
//	go test ./flightsvc/internal/statuspage/
//
// Without a chromium binary the test skips, unless CI=true or FLIGHT_SINK_REQUIRE_BROWSER=1,
// where it fails and says how to install one (apt-get update && apt-get install -y chromium).
// FLIGHT_SINK_CHROMIUM names another binary (e.g. google-chrome) to use instead.
package statuspage

// Package statuspage is the status page of both admin listeners (the gfe's
// and the control plane's): one embedded HTML page, a script and a style
// sheet, with no build step and no external asset, so it works offline.
//
// # Model
//
// The page holds no data. Its script fetches the listener's own /status
// JSON once a second (POLL_MS in assets/page.js) and redraws the page
// without reloading it. It draws only what /status says: the plan, shares,
// reasons, capacities and health are computed by the daemon
// (internal/gfe's Status, internal/controlplane's status page), and the
// script only orders, sums for display and formats them. It tells the two
// daemons apart by the document's shape: a control plane's has health and
// gfes, a gfe's services.
//
// On a gfe it shows first its snapshot stream from the control plane, in
// red while the gfe refuses the control plane's snapshots (it then serves
// an older one and no longer follows health changes), with the last
// refusal and the fields of a newer control plane it ignored; then, per
// service:
//
//   - the waterfall for the gfe's site: every region in the site's RTT order
//     (the plan row's order), with the site's share and its reason (nearest,
//     spill_capacity, spill_health, overload) as a bar coloured by reason,
//     and the region's planned load, capacity, effective capacity,
//     utilization, healthy instances and the share it keeps (rule 5);
//   - the global plan: a site × region table of every site's demand and
//     where the plan sends it;
//   - groups and instances: healthy, unhealthy, ejected (and demoted, when
//     /status carries it), in flight, capacities and the local signal;
//   - the decision counters.
//
// On a control plane it shows every instance's health by group, which
// replica checks it, and the connected gfes with their build (release),
// acks and nacks, NACKs in a row and the configured fields each cannot
// read; the gfes refusing the current snapshot (lagging) are named in red
// at the top.
// Sections that other parts of Spillway add to /status later (autoscaler,
// quota: a top-level or per-service "autoscaler" or "quota" key) are drawn
// as generic tables when present and not at all when absent.
//
// # Security
//
// The page is mounted on the admin listener, behind the same optional
// bearer token as every other admin page (internal/adminhttp.Guard), and
// shows nothing /status does not already serve. Every response carries a
// Content-Security-Policy that allows only the page's own script, style
// sheet and same-origin fetches (no inline script or style, no frames, no
// form targets), X-Content-Type-Options: nosniff and Referrer-Policy:
// no-referrer. The script builds the DOM with textContent and attributes,
// never innerHTML, so no value from /status is parsed as markup.
package statuspage

// /mirador.html?id=NAME (or ?manifest=URL): the image model's IIIF Presentation 3 manifest in Mirador (vendored).
// The catalog holds every image model's manifest, from the service's collection.
const params = new URLSearchParams(location.search);
const iiif = new URL("iiif/3/", location.href);
const id = params.get("id") || "astronaut";
const manifest = params.get("manifest") || new URL(`${encodeURIComponent(id)}/manifest.json`, iiif).href;

window.miradorViewer = Mirador.viewer({
  id: "mirador",
  windows: [{ manifestId: manifest, thumbnailNavigationPosition: "far-bottom" }],
  catalog: [{ manifestId: manifest }, { manifestId: new URL("collection.json", iiif).href }],
  window: { allowClose: false, defaultSideBarPanel: "info", sideBarOpenByDefault: true },
  workspaceControlPanel: { enabled: false },
});

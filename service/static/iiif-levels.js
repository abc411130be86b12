// OpenSeadragon levels past an image model's native size, built from its IIIF info.json.
//
// OpenSeadragon makes a IIIF image's levels from info.json's tile scale factors: its finest level is
// the native size (scale factor 1) and past it OpenSeadragon can only magnify the native tiles. Our
// info.json also says the image may be asked for larger than native (extraFeatures `sizeUpscaling`,
// `maxWidth`/`maxHeight` = native × INR_IIIF_ZOOM, docs/iiif.md). So this tile source adds levels
// at 2×, 4×, … native (at most MAX_EXTRA of them, within maxWidth/maxHeight): each of their tiles is
// the IIIF request of its native region at the tile's pixel size with the `^` prefix (upscaling),
// which the model renders at those coordinates. OpenSeadragon's image coordinates stay the native
// pixels (getContentSize, viewportToImageZoom), and the levels at or below native ask exactly what
// OpenSeadragon's own IIIFTileSource asks.

export const MAX_EXTRA = 3;           // levels past native: up to 8× native
// OpenSeadragon draws each level whose pixels cover at least this many screen pixels (its default
// is 0.5). A little above 0.5, so that at exactly native zoom (1 screen px per image px) the 2×
// level, whose pixels are 0.5 screen px, is not asked for: the model's upscaled tiles cost 4× the
// native ones and are only fetched once the view is past native (from 1.1 screen px per image px).
export const MIN_PIXEL_RATIO = 0.55;

// How many levels past native the info.json allows: log2 of maxWidth/width (and height), capped.
export function extraLevels(info, tile = 512) {
  if (!(info.extraFeatures || []).includes("sizeUpscaling")) return 0;
  const room = Math.min((info.maxWidth || info.width) / info.width, (info.maxHeight || info.height) / info.height);
  let extra = Math.max(0, Math.min(MAX_EXTRA, Math.floor(Math.log2(room))));
  while (extra > 0 && tile % 2 ** extra) extra -= 1;   // a tile's native region stays whole pixels
  return extra;
}

// The IIIF URL of tile (x, y) at `scale` level pixels per native pixel (a power of two; above 1 past
// native, where the size takes `^`). W×H: the native size; tw×th: the tile size in level pixels.
export function tileUrl(id, W, H, tw, th, scale, x, y, format = "jpg", quality = "default") {
  const lw = Math.ceil(W * scale), lh = Math.ceil(H * scale);
  const up = scale > 1 ? "^" : "";
  const size = (w, h) => (w === W && h === H ? "max" : `${up}${w},${h}`);
  let region, sz;
  if (lw < tw && lh < th) {            // the whole image in one tile
    region = "full";
    sz = size(lw, lh);
  } else {
    const rx = x * tw / scale, ry = y * th / scale;   // native pixels
    const rw = Math.min(tw / scale, W - rx), rh = Math.min(th / scale, H - ry);
    region = rx === 0 && ry === 0 && rw === W && rh === H ? "full" : `${rx},${ry},${rw},${rh}`;
    sz = size(Math.min(tw, lw - x * tw), Math.min(th, lh - y * th));
  }
  return `${id}/${region}/${sz}/0/${quality}.${format}`;
}

// A IIIFTileSource for info.json (fetched from `url`) with the levels past native, or null when the
// document has no single tile size with power-of-two scale factors (then OpenSeadragon's own applies).
export function nativeTileSource(info, url) {
  const OSD = window.OpenSeadragon;
  const tiles = info.tiles || [];
  if (tiles.length !== 1 || !info.width || !info.height) return null;
  const tw = tiles[0].width, th = tiles[0].height || tiles[0].width;
  const native = Math.log2(Math.max(...(tiles[0].scaleFactors || [1])));
  if (!Number.isInteger(native)) return null;
  const extra = extraLevels(info, Math.min(tw, th));
  const data = OSD.IIIFTileSource.prototype.configure(JSON.parse(JSON.stringify(info)), url);
  data.maxLevel = native + extra;
  const source = new OSD.IIIFTileSource(data);
  source.nativeLevel = native;
  source.extraLevels = extra;
  source.getLevelScale = (level) => 2 ** (level - native);     // level pixels per native pixel
  source.getTileUrl = (level, x, y) => tileUrl(source._id, info.width, info.height, tw, th,
    2 ** (level - native), x, y, source.tileFormat, source.tileQuality || "default");
  return source;
}

// The level OpenSeadragon draws at `zoom` device px per native px (MIN_PIXEL_RATIO), as level
// pixels per native pixel: 2 past native means the model's 2× tiles.
export function tileScale(zoom, source) {
  const finest = 2 ** (source ? source.extraLevels : 0);
  const coarsest = 2 ** -(source ? source.nativeLevel : 0);
  const s = 2 ** Math.floor(Math.log2(zoom / MIN_PIXEL_RATIO));
  return Math.min(finest, Math.max(coarsest, s));
}

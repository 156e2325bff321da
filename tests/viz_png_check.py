"""Is a screenshot of the attn viz page more than a blank page? Counts the pixels that are not
white and those of the heat map's blue scale. Usage: viz_png_check.py SHOT.png
Exit 0 when it is not blank, 1 when it is, 77 when PIL is not installed (python3-pil)."""
import sys

try:
    from PIL import Image
except ImportError:
    print("viz_png_check: PIL (python3-pil) is not installed")
    sys.exit(77)

img = Image.open(sys.argv[1]).convert("RGB")
w, h = img.size
px = img.load()
inked = blue = 0
for y in range(h):
    for x in range(w):
        r, g, b = px[x, y]
        if r < 245 or g < 245 or b < 245:
            inked += 1
            if b > r + 40 and b > 90:
                blue += 1
print("viz_png_check: %dx%d, %d non-white pixels (%.1f%%), %d blue" % (w, h, inked, 100.0 * inked / (w * h), blue))
sys.exit(0 if inked > 0.02 * w * h and blue > 500 else 1)

#!/usr/bin/env bash
# Makes the meal photo fixtures with libvips' command line (libvips-tools), libheif's encoder
# (libheif-examples) and ExifTool (libimage-exiftool-perl):
#   plate.heic  2400 x 1800 HEIC with what an iPhone writes into its EXIF: the camera (Make, Model,
#               LensModel), the time taken and a GPS position. Cleaned, it is a 2048 x 1536 JPEG (at
#               most 2048 on the long side) without them. (A HEIC is turned by its `irot` box, which
#               libheif applies while decoding, not by an EXIF orientation.)
#   plate.png   the same picture, 640 x 480, no metadata: a small PNG upload and the e2e's photo.
#   tall.png    9000 x 16 of one grey: a side over the 8192-pixel limit, refused from its header.
#   plate24.jpg, plate24.heic
#               the plate at 5712 x 4284, the 24-megapixel photo a current iPhone takes by default:
#               73 MB decoded whole, which a JPEG never is here (it decodes at half its sides).
#   plate-progressive.jpg
#               the plate at 3712 x 2784 as a progressive JPEG: libjpeg holds all its coefficients
#               whatever the scale, so it counts whole against the decode budget (31 MB).
set -euo pipefail
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A plate: a warm background with a light disc and a green and a brown patch on it, so a turned or
# wrongly coloured result shows in the pixels.
vips black "$work/bg.v" 2400 1800 --bands 3
vips linear "$work/bg.v" "$work/warm.v" "1 1 1" "200 120 60"
vips xyz "$work/xy.v" 2400 1800
vips extract_band "$work/xy.v" "$work/x.v" 0
vips extract_band "$work/xy.v" "$work/y.v" 1
vips linear -- "$work/x.v" "$work/dx.v" 1 -1200
vips linear -- "$work/y.v" "$work/dy.v" 1 -900
vips multiply "$work/dx.v" "$work/dx.v" "$work/dx2.v"
vips multiply "$work/dy.v" "$work/dy.v" "$work/dy2.v"
vips add "$work/dx2.v" "$work/dy2.v" "$work/r2.v"
vips relational_const "$work/r2.v" "$work/disc.v" less 640000
vips black "$work/plate0.v" 2400 1800 --bands 3
vips linear "$work/plate0.v" "$work/white.v" "1 1 1" "240 240 235"
vips ifthenelse "$work/disc.v" "$work/white.v" "$work/warm.v" "$work/plate.v"
vips black "$work/g0.v" 500 400 --bands 3
vips linear "$work/g0.v" "$work/green.v" "1 1 1" "40 160 60"
vips linear "$work/g0.v" "$work/brown.v" "1 1 1" "120 70 30"
vips insert "$work/plate.v" "$work/green.v" "$work/p1.v" 700 600
vips insert "$work/p1.v" "$work/brown.v" "$work/p2.v" 1250 800
vips cast "$work/p2.v" "$work/p3.v" uchar
vips copy "$work/p3.v" "$work/plate.png"
heif-enc -q 60 -o plate.heic "$work/plate.png"
exiftool -q -overwrite_original -Make=Apple "-Model=iPhone 15 Pro" "-LensModel=iPhone 15 Pro back camera" \
    "-DateTimeOriginal=2026:11:27 12:31:05" -GPSLatitude=52.5200 -GPSLatitudeRef=N -GPSLongitude=13.4050 -GPSLongitudeRef=E plate.heic
vips resize "$work/plate.png" plate.png 0.26666666666666666 --vscale 0.26666666666666666
vips copy plate.png "$work/small.png[strip]" && mv "$work/small.png" plate.png
vips black "$work/tall.v" 9000 16
vips linear "$work/tall.v" "$work/tall1.v" 1 128
vips cast "$work/tall1.v" "$work/tall2.v" uchar
vips copy "$work/tall2.v" "tall.png[strip]"
vips resize plate.heic "$work/plate24.v" 2.38
vips copy "$work/plate24.v" "plate24.jpg[Q=60,optimize-coding,strip]"
vips copy "$work/plate24.v" "$work/plate24.png"
heif-enc -q 40 -o plate24.heic "$work/plate24.png"
vips resize plate.heic "$work/plate37.v" 1.5467
vips copy "$work/plate37.v" "plate-progressive.jpg[Q=30,interlace,optimize-coding,strip]"

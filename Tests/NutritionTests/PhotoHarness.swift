import Foundation
import HTTPTypes
import Images
import NIOCore
@testable import Nutrition
import Testing
import TestSupport

/// Photos for the meal photo and analysis tests, and the request bodies that carry them.
enum Photos {
    /// A fixture's bytes: `Tests/Fixtures/meals` (its `make_fixtures.sh` made them) or
    /// `Tests/Fixtures/avatars`.
    static func fixture(_ path: String) throws -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/\(path)")
        return Array(try Data(contentsOf: url))
    }

    static let boundary = "----meal-photo-test-boundary"

    /// A `multipart/form-data` body: text fields, then the photo as the file field `photo`.
    static func form(
        photo: [UInt8]?, fields: [(String, String)] = [], filename: String = "plate.heic", type: String = "image/heic", boundary: String = boundary
    ) -> (ByteBuffer, HTTPFields) {
        var body = ByteBuffer()
        for (name, value) in fields {
            body.writeString("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(name)\"\r\n\r\n\(value)\r\n")
        }
        if let photo {
            body.writeString("--\(boundary)\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"\(filename)\"\r\nContent-Type: \(type)\r\n\r\n")
            body.writeBytes(photo)
            body.writeString("\r\n")
        }
        body.writeString("--\(boundary)--\r\n")
        return (body, [.contentType: "multipart/form-data; boundary=\(boundary)"])
    }

    /// The width and height a JPEG's first start-of-frame marker states.
    static func jpegSize(_ bytes: [UInt8]) -> (width: Int, height: Int)? {
        var index = 2
        while index + 9 < bytes.count {
            guard bytes[index] == 0xFF else { return nil }
            let marker = bytes[index + 1]
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                return (Int(bytes[index + 7]) << 8 | Int(bytes[index + 8]), Int(bytes[index + 5]) << 8 | Int(bytes[index + 6]))
            }
            index += 2 + length
        }
        return nil
    }

    /// The JPEG's segments before its image data: none may be APP1 (EXIF, XMP), APP2 (ICC), APP13
    /// (IPTC) or a comment.
    static func jpegMetadataMarkers(_ bytes: [UInt8]) -> [UInt8] {
        var found: [UInt8] = []
        var index = 2
        while index + 3 < bytes.count, bytes[index] == 0xFF {
            let marker = bytes[index + 1]
            if marker == 0xDA { break }
            if [0xE1, 0xE2, 0xED, 0xFE].contains(marker) { found.append(marker) }
            index += 2 + (Int(bytes[index + 2]) << 8 | Int(bytes[index + 3]))
        }
        return found
    }

    /// True when `needle` occurs in `haystack`.
    static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        let bytes = Array(needle.utf8)
        guard haystack.count >= bytes.count else { return false }
        return (0...(haystack.count - bytes.count)).contains { haystack[$0..<($0 + bytes.count)].elementsEqual(bytes) }
    }

    /// The mean colour of a rectangle of RGB pixels.
    static func mean(_ image: (width: Int, height: Int, pixels: [UInt8]), x: Range<Int>, y: Range<Int>) -> (Double, Double, Double) {
        var sums = (0.0, 0.0, 0.0)
        for row in y {
            for column in x {
                let offset = (row * image.width + column) * 3
                sums.0 += Double(image.pixels[offset])
                sums.1 += Double(image.pixels[offset + 1])
                sums.2 += Double(image.pixels[offset + 2])
            }
        }
        let count = Double(x.count * y.count)
        return (sums.0 / count, sums.1 / count, sums.2 / count)
    }

    static func close(_ a: (Double, Double, Double), _ b: (Double, Double, Double), within tolerance: Double) -> Bool {
        abs(a.0 - b.0) <= tolerance && abs(a.1 - b.1) <= tolerance && abs(a.2 - b.2) <= tolerance
    }
}

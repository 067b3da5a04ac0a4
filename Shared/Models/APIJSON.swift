import Foundation

/// The API's JSON, for response bodies and event payloads alike: the text `JSONEncoder.api` writes
/// (keys sorted by their UTF-8 bytes, slashes unescaped, RFC 3339 dates, `1.0` as `1`) except that
/// UUIDs are lowercase, as RFC 9562 asks of output (Foundation writes them uppercase), written
/// straight into bytes.
///
/// Foundation's encoder builds a tree of values, checks every value against the types it treats
/// specially with dynamic casts, and sorts each object's keys from a dictionary: a sixth of a profile
/// read's CPU. Here each container writes where it stands in the output; an object whose keys did not
/// arrive in order is put in order when it closes (when the value that opened it has been encoded).
/// Sorting was a fifth of encoding a profile, so the views of the busiest routes (a profile, `me`) declare
/// their `CodingKeys` in the order of their names, which the synthesized `encode(to:)` follows.
///
/// A container is written to only while the ones opened after it are done with, as the synthesized
/// `Encodable` code and ours do. Code that goes back to a container it has left, mixes kinds of
/// container for one value, writes a key twice, or catches an error a value threw and goes on, makes
/// `encode` throw `APIJSON.Unsupported`, and `encodeOrFoundation` then uses Foundation's encoder,
/// whose UUIDs are uppercase; the product's own types never take that way (`APIJSONTests`).
public enum APIJSON {
    package struct Unsupported: Error, CustomStringConvertible {
        package let description: String
    }

    /// `encode`, or Foundation's `JSONEncoder.api` for a value `encode` does not support.
    public static func encodeOrFoundation<T: Encodable>(_ value: T) throws -> [UInt8] {
        do {
            return try encode(value)
        } catch is Unsupported {
            return Array(try JSONEncoder.api.encode(value))
        }
    }

    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let writer = JSONByteWriter()
        try writer.encodeValue(value)
        writer.closeFrames(downTo: 0)
        if let failure = writer.failure { throw failure }
        return writer.bytes
    }
}

/// The encoder every value of one response is encoded with.
final class JSONByteWriter: Encoder {
    /// An open object or array: where it starts, how many entries it has, and (for objects) whether
    /// its keys came in order so far.
    struct Frame {
        var id: Int
        var isObject: Bool
        var start: Int
        var count = 0
        var firstEntry: Int
        var inOrder = true
    }

    /// An object's entry: `"key":value`, from `start` (the key's quote) to `end`. A key written
    /// without escapes (`plain`) is compared by its bytes in the output.
    struct Entry {
        var key: String
        var start: Int
        var keyLength: Int
        var plain: Bool
        var end: Int
    }

    // Only this writer touches these, one call at a time: the runtime's exclusivity checks on
    // them were a quarter of the writer's instructions.
    @exclusivity(unchecked) var bytes: [UInt8] = []
    /// Set by a use this writer does not support; sticky, so that an error swallowed by the caller's
    /// `encode(to:)` still sends the value to Foundation's encoder.
    @exclusivity(unchecked) var failure: APIJSON.Unsupported?
    @exclusivity(unchecked) var frames: [Frame] = []
    @exclusivity(unchecked) var entries: [Entry] = []
    @exclusivity(unchecked) private var scratch: [UInt8] = []
    @exclusivity(unchecked) private var nextFrameID = 0
    /// The frame opened for the value being encoded, so that asking twice gives the same container.
    @exclusivity(unchecked) private var valueFrame: (index: Int, id: Int)?
    @exclusivity(unchecked) private var valueStart = 0

    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init() {
        bytes.reserveCapacity(1024)
        frames.reserveCapacity(16)
        entries.reserveCapacity(64)
    }

    // MARK: Encoder

    /// Asked again for the same value, the container it already has.
    /// A value that mixes kinds (a single value, then a container; an array, then an object), which
    /// Foundation merges, is left to Foundation.
    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if let frame = ownFrame() {
            if !frames[frame.index].isObject { fail("a keyed container after an unkeyed one for one value") }
            return KeyedEncodingContainer(KeyedContainer(writer: self, depth: frame.index, id: frame.id))
        }
        if bytes.count != valueStart { fail("a keyed container after a single value for one value") }
        return makeKeyed()
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if let frame = ownFrame() {
            if frames[frame.index].isObject { fail("an unkeyed container after a keyed one for one value") }
            return UnkeyedContainer(writer: self, depth: frame.index, id: frame.id)
        }
        if bytes.count != valueStart { fail("an unkeyed container after a single value for one value") }
        return makeUnkeyed()
    }

    /// The container already opened for the value being encoded, if it is still open.
    private func ownFrame() -> (index: Int, id: Int)? {
        guard let frame = valueFrame, frame.index < frames.count, frames[frame.index].id == frame.id else { return nil }
        return frame
    }

    /// Before a single value is written: nothing may have been written for this value yet.
    func beginSingleValue() {
        if valueFrame != nil || bytes.count != valueStart { fail("a single value after a container for one value") }
    }

    func makeKeyed<Key: CodingKey>() -> KeyedEncodingContainer<Key> {
        let depth = open(isObject: true)
        return KeyedEncodingContainer(KeyedContainer(writer: self, depth: depth, id: frames[depth].id))
    }

    func makeUnkeyed() -> any UnkeyedEncodingContainer {
        let depth = open(isObject: false)
        return UnkeyedContainer(writer: self, depth: depth, id: frames[depth].id)
    }

    func fail(_ why: String) {
        if failure == nil { failure = APIJSON.Unsupported(description: why) }
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleValueContainer(writer: self) }

    // MARK: Values

    func encodeValue<T: Encodable>(_ value: T) throws {
        // The types JSONEncoder treats specially, and the common primitives, without `encode(to:)`.
        if T.self == String.self { writeString(unsafeBitCast(value, to: String.self)); return }
        if T.self == Int.self { writeInteger(unsafeBitCast(value, to: Int.self)); return }
        if T.self == Bool.self { write((unsafeBitCast(value, to: Bool.self)) ? "true" : "false"); return }
        if T.self == UUID.self { writeUUID(unsafeBitCast(value, to: UUID.self)); return }
        if T.self == Date.self { writeString(RFC3339.string(from: unsafeBitCast(value, to: Date.self))); return }
        if T.self == Double.self { try writeFloat(unsafeBitCast(value, to: Double.self)); return }
        if T.self == Int32.self { writeInteger(Int(unsafeBitCast(value, to: Int32.self))); return }
        if T.self == Int64.self { writeInteger(Int(unsafeBitCast(value, to: Int64.self))); return }
        if T.self == Float.self { try writeFloat(unsafeBitCast(value, to: Float.self)); return }
        if T.self == Data.self { writeString((unsafeBitCast(value, to: Data.self)).base64EncodedString()); return }
        if T.self == URL.self { writeString((unsafeBitCast(value, to: URL.self)).absoluteString); return }
        if T.self == Decimal.self { write((unsafeBitCast(value, to: Decimal.self)).description); return }
        let outer = (valueFrame, valueStart)
        valueFrame = nil
        valueStart = bytes.count
        defer { (valueFrame, valueStart) = outer }
        let depth = frames.count
        do {
            try value.encode(to: self)
        } catch {
            // Its key or comma is already out: should the caller catch this and go on, the output
            // would not be JSON, so the value goes to Foundation (an error that reaches the top
            // still propagates as it is).
            fail("a value threw while being encoded: \(error)")
            throw error
        }
        closeFrames(downTo: depth)
        // A value that encoded nothing is an empty object, as with JSONEncoder, which refuses it at the top.
        if bytes.count == valueStart {
            if valueStart == 0 { throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "Top-level \(T.self) did not encode any values.")) }
            write("{}")
        }
    }

    private func open(isObject: Bool) -> Int {
        bytes.append(isObject ? UInt8(ascii: "{") : UInt8(ascii: "["))
        nextFrameID += 1
        frames.append(Frame(id: nextFrameID, isObject: isObject, start: bytes.count - 1, firstEntry: entries.count))
        if valueFrame == nil, bytes.count - 1 == valueStart { valueFrame = (frames.count - 1, nextFrameID) }
        return frames.count - 1
    }

    /// Closes the containers opened after `depth` (they are done: one at or below it is written to).
    func closeFrames(downTo depth: Int) {
        while frames.count > depth {
            let frame = frames.removeLast()
            if frame.isObject {
                if frame.count > 0 { entries[entries.count - 1].end = bytes.count }
                if !frame.inOrder { sortEntries(of: frame) }
                entries.removeSubrange(frame.firstEntry...)
                bytes.append(UInt8(ascii: "}"))
            } else {
                bytes.append(UInt8(ascii: "]"))
            }
        }
    }

    /// Ready to write into the container `depth` made as `id`; refuses one already closed.
    func prepare(depth: Int, id: Int) throws {
        if frames.count > depth + 1 { closeFrames(downTo: depth + 1) }
        guard depth < frames.count, frames[depth].id == id else {
            fail("a container was written to after a later one had been used")
            throw failure!
        }
    }

    func beginEntry(_ key: String, depth: Int, id: Int) throws {
        try prepare(depth: depth, id: id)
        if frames[depth].count > 0 {
            entries[entries.count - 1].end = bytes.count
            bytes.append(UInt8(ascii: ","))
        }
        let start = bytes.count
        let plain = writeString(key)
        let entry = Entry(key: key, start: start, keyLength: bytes.count - start, plain: plain, end: -1)
        bytes.append(UInt8(ascii: ":"))
        if frames[depth].inOrder, frames[depth].count > 0, !precedes(entries[entries.count - 1], entry) {
            frames[depth].inOrder = false
        }
        entries.append(entry)
        frames[depth].count += 1
    }

    func beginElement(depth: Int, id: Int) throws {
        try prepare(depth: depth, id: id)
        if frames[depth].count > 0 { bytes.append(UInt8(ascii: ",")) }
        frames[depth].count += 1
    }

    /// JSONEncoder's order for sorted keys: by their UTF-8 bytes. A key written as it is (nearly all
    /// are) is compared where it stands in the output, between its quotes.
    func precedes(_ a: Entry, _ b: Entry) -> Bool {
        guard a.plain, b.plain else { return a.key.utf8.lexicographicallyPrecedes(b.key.utf8) }
        return bytes.withUnsafeBufferPointer { buffer in
            let common = min(a.keyLength, b.keyLength) - 2
            let order = memcmp(buffer.baseAddress! + a.start + 1, buffer.baseAddress! + b.start + 1, common)
            return order != 0 ? order < 0 : a.keyLength < b.keyLength
        }
    }

    /// Rewrites an object's entries in key order (an insertion sort: objects are small).
    private func sortEntries(of frame: Frame) {
        var order = Array(frame.firstEntry..<entries.count)
        for i in 1..<order.count {
            let moving = order[i]
            var j = i
            while j > 0, precedes(entries[moving], entries[order[j - 1]]) {
                order[j] = order[j - 1]
                j -= 1
            }
            order[j] = moving
        }
        // A key written twice: Foundation keeps the last value.
        for i in 1..<order.count where !precedes(entries[order[i - 1]], entries[order[i]]) {
            fail("a key written twice")
            break
        }
        scratch.removeAll(keepingCapacity: true)
        bytes.withUnsafeBufferPointer { buffer in
            for (index, entry) in order.enumerated() {
                if index > 0 { scratch.append(UInt8(ascii: ",")) }
                let e = entries[entry]
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[e.start..<e.end]))
            }
        }
        bytes.withUnsafeMutableBufferPointer { buffer in
            scratch.withUnsafeBufferPointer { sorted in
                _ = memcpy(buffer.baseAddress! + frame.start + 1, sorted.baseAddress!, sorted.count)
            }
        }
    }

    // MARK: Writing

    func write(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    func write(_ text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`-style or `\u00XX` escapes.
    /// True when nothing needed escaping.
    @discardableResult
    func writeString(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { utf8 -> Bool in
            bytes.append(UInt8(ascii: "\""))
            var mark = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[mark..<index]))
                mark = index + 1
                switch byte {
                case UInt8(ascii: "\""): write("\\\"")
                case UInt8(ascii: "\\"): write("\\\\")
                case 0x08: write("\\b")
                case 0x0C: write("\\f")
                case 0x0A: write("\\n")
                case 0x0D: write("\\r")
                case 0x09: write("\\t")
                default:
                    write("\\u00")
                    bytes.append(Self.hexLower[Int(byte >> 4)])
                    bytes.append(Self.hexLower[Int(byte & 0xF)])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[mark...]))
            bytes.append(UInt8(ascii: "\""))
            return mark == 0
        }
    }

    func writeInteger(_ value: Int) {
        if value == 0 { bytes.append(UInt8(ascii: "0")); return }
        var magnitude = value.magnitude
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        let start = bytes.count
        while magnitude > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        }
        bytes[start...].reverse()
    }

    func writeUnsigned(_ value: UInt64) {
        if value <= UInt64(Int.max) { writeInteger(Int(value)) } else { write(String(value)) }
    }

    func writeFloat<F: BinaryFloatingPoint & CustomStringConvertible>(_ value: F) throws {
        guard value.isFinite else {
            fail("a non-finite number")
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "Unable to encode \(F.self).\(value) directly in JSON."))
        }
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        write(text)
    }

    /// Lowercase (RFC 9562 §4: "output as lower case").
    func writeUUID(_ uuid: UUID) {
        bytes.append(UInt8(ascii: "\""))
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: 36))
        let (high, low) = uuid.halves
        bytes.withUnsafeMutableBufferPointer { buffer in
            UUIDText.write(high: high, low: low, uppercase: false, into: UnsafeMutableBufferPointer(rebasing: buffer[start...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private static let hexLower: [UInt8] = Array("0123456789abcdef".utf8)
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: JSONByteWriter
    let depth: Int
    let id: Int

    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.write("null") }
    mutating func encode(_ value: Bool, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.write(value ? "true" : "false") }
    mutating func encode(_ value: String, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeString(value) }
    mutating func encode(_ value: Double, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); try writer.writeFloat(value) }
    mutating func encode(_ value: Float, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); try writer.writeFloat(value) }
    mutating func encode(_ value: Int, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(value) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeUnsigned(UInt64(value)) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.writeUnsigned(value) }
    mutating func encode(_ value: Int128, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.write(value.description) }
    mutating func encode(_ value: UInt128, forKey key: Key) throws { try writer.beginEntry(key.stringValue, depth: depth, id: id); writer.write(value.description) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try writer.beginEntry(key.stringValue, depth: depth, id: id)
        try writer.encodeValue(value)
    }

    // A missing value leaves its key out, as JSONEncoder does. The protocol's own versions of these
    // reach `encode` through generic code that looks up `Optional`'s metadata on every call; the
    // generic one below still does (the busiest view, `ProfileView`, writes its own optionals).
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { if let value { try encode(value, forKey: key) } }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { if let value { try encode(value, forKey: key) } }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { if let value { try encode(value, forKey: key) } }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { if let value { try encode(value, forKey: key) } }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { if let value { try encode(value, forKey: key) } }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        beginNested(forKey: key)
        return writer.makeKeyed()
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        beginNested(forKey: key)
        return writer.makeUnkeyed()
    }

    /// Class hierarchies' encoding, which no response uses: left to Foundation.
    mutating func superEncoder() -> any Encoder { writer.fail("superEncoder"); return writer }
    mutating func superEncoder(forKey key: Key) -> any Encoder { writer.fail("superEncoder"); return writer }

    /// The protocol gives these no way to throw; a misuse is kept in `failure`.
    private func beginNested(forKey key: Key) {
        do { try writer.beginEntry(key.stringValue, depth: depth, id: id) } catch { writer.fail("\(error)") }
    }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let writer: JSONByteWriter
    let depth: Int
    let id: Int

    var codingPath: [any CodingKey] { [] }
    var count: Int { depth < writer.frames.count && writer.frames[depth].id == id ? writer.frames[depth].count : 0 }

    mutating func encodeNil() throws { try writer.beginElement(depth: depth, id: id); writer.write("null") }
    mutating func encode(_ value: String) throws { try writer.beginElement(depth: depth, id: id); writer.writeString(value) }
    mutating func encode(_ value: Bool) throws { try writer.beginElement(depth: depth, id: id); writer.write(value ? "true" : "false") }
    mutating func encode(_ value: Int) throws { try writer.beginElement(depth: depth, id: id); writer.writeInteger(value) }
    mutating func encode(_ value: Double) throws { try writer.beginElement(depth: depth, id: id); try writer.writeFloat(value) }
    mutating func encode(_ value: Int128) throws { try writer.beginElement(depth: depth, id: id); writer.write(value.description) }
    mutating func encode(_ value: UInt128) throws { try writer.beginElement(depth: depth, id: id); writer.write(value.description) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try writer.beginElement(depth: depth, id: id)
        try writer.encodeValue(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        beginNested()
        return writer.makeKeyed()
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        beginNested()
        return writer.makeUnkeyed()
    }

    mutating func superEncoder() -> any Encoder { writer.fail("superEncoder"); return writer }

    private func beginNested() {
        do { try writer.beginElement(depth: depth, id: id) } catch { writer.fail("\(error)") }
    }
}

private struct SingleValueContainer: SingleValueEncodingContainer {
    let writer: JSONByteWriter
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil() throws { writer.beginSingleValue(); writer.write("null") }
    mutating func encode(_ value: Bool) throws { writer.beginSingleValue(); writer.write(value ? "true" : "false") }
    mutating func encode(_ value: String) throws { writer.beginSingleValue(); writer.writeString(value) }
    mutating func encode(_ value: Double) throws { writer.beginSingleValue(); try writer.writeFloat(value) }
    mutating func encode(_ value: Float) throws { writer.beginSingleValue(); try writer.writeFloat(value) }
    mutating func encode(_ value: Int) throws { writer.beginSingleValue(); writer.writeInteger(value) }
    mutating func encode(_ value: Int8) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int16) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int32) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int64) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: Int128) throws { writer.beginSingleValue(); writer.write(value.description) }
    mutating func encode(_ value: UInt) throws { writer.beginSingleValue(); writer.writeUnsigned(UInt64(value)) }
    mutating func encode(_ value: UInt8) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt16) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt32) throws { writer.beginSingleValue(); writer.writeInteger(Int(value)) }
    mutating func encode(_ value: UInt64) throws { writer.beginSingleValue(); writer.writeUnsigned(value) }
    mutating func encode(_ value: UInt128) throws { writer.beginSingleValue(); writer.write(value.description) }
    mutating func encode<T: Encodable>(_ value: T) throws { writer.beginSingleValue(); try writer.encodeValue(value) }
}

import Foundation
import Models
import ServiceKit

/// One set of a block as prescribed: exactly one of `reps`, `duration_s` or `distance_m`, and
/// optionally a load, an effort and the rest after it.
struct WorkoutSet: Codable, Sendable, Equatable {
    @Nullable var reps: Int?
    @Nullable var durationS: Int?
    @Nullable var distanceM: Double?
    @Nullable var weightKg: Double?
    @Nullable var rpe: Double?
    @Nullable var restS: Int?

    enum CodingKeys: String, CodingKey, CaseIterable {
        case reps, durationS = "duration_s", distanceM = "distance_m", weightKg = "weight_kg", rpe, restS = "rest_s"
    }

    init(from decoder: any Decoder) throws {
        try StrictKeys.check(decoder, CodingKeys.self, what: "a set")
        let container = try decoder.container(keyedBy: CodingKeys.self)
        reps = try container.decodeWholeIfPresent(forKey: .reps)
        durationS = try container.decodeWholeIfPresent(forKey: .durationS)
        distanceM = try container.decodeIfPresent(Double.self, forKey: .distanceM)
        weightKg = try container.decodeIfPresent(Double.self, forKey: .weightKg)
        rpe = try container.decodeIfPresent(Double.self, forKey: .rpe)
        restS = try container.decodeWholeIfPresent(forKey: .restS)
    }

    // The documented ranges (openapi.yaml, API.md).
    static let reps = 1...1_000
    static let durationS = 1...86_400
    static let distanceM = 0.1...1_000_000.0
    static let weightKg = 0.0...1_000.0
    static let rpe = 1.0...10.0
    static let restS = 0...3_600

    func problems(at field: String) -> [Problem.FieldError] {
        var problems: [Problem.FieldError] = []
        let measures = [reps != nil, durationS != nil, distanceM != nil].filter { $0 }.count
        if measures != 1 { problems.append(.init(field: field, message: "must give exactly one of reps, duration_s and distance_m")) }
        func whole(_ value: Int?, _ range: ClosedRange<Int>, _ name: String) {
            if let value, !range.contains(value) { problems.append(.init(field: "\(field).\(name)", message: "must be a whole number from \(range.lowerBound) to \(range.upperBound)")) }
        }
        func number(_ value: Double?, _ range: ClosedRange<Double>, _ name: String) {
            if let value, !(value.isFinite && range.contains(value)) {
                problems.append(.init(field: "\(field).\(name)", message: "must be a number from \(range.lowerBound) to \(range.upperBound)"))
            }
        }
        whole(reps, Self.reps, "reps")
        whole(durationS, Self.durationS, "duration_s")
        number(distanceM, Self.distanceM, "distance_m")
        number(weightKg, Self.weightKg, "weight_kg")
        number(rpe, Self.rpe, "rpe")
        whole(restS, Self.restS, "rest_s")
        return problems
    }
}

/// One exercise of a workout and its sets; blocks sharing a `superset` label are done in turn.
struct WorkoutBlock: Codable, Sendable, Equatable {
    var exerciseID: UUID
    @Nullable var notes: String?
    @Nullable var superset: String?
    var sets: [WorkoutSet]

    enum CodingKeys: String, CodingKey, CaseIterable {
        case exerciseID = "exercise_id", notes, superset, sets
    }

    init(from decoder: any Decoder) throws {
        try StrictKeys.check(decoder, CodingKeys.self, what: "a block")
        let container = try decoder.container(keyedBy: CodingKeys.self)
        exerciseID = try container.decode(UUID.self, forKey: .exerciseID)
        notes = try container.decodeIfPresent(String.self, forKey: .notes)
        superset = try container.decodeIfPresent(String.self, forKey: .superset)
        sets = try container.decode([WorkoutSet].self, forKey: .sets)
    }

    static let maxSets = 20
    static let maxNotes = 1_000
    static let maxSuperset = 20

    func problems(at field: String) -> [Problem.FieldError] {
        var problems: [Problem.FieldError] = []
        if let notes, notes.codePoints > Self.maxNotes || notes.hasInvisibleCharacters(allowing: ["\n"]) {
            problems.append(.init(field: "\(field).notes", message: "must be at most \(Self.maxNotes) characters, without control characters but line breaks"))
        }
        if let superset, superset.trimmingCharacters(in: .whitespaces).isEmpty || superset.codePoints > Self.maxSuperset || superset.hasInvisibleCharacters() {
            problems.append(.init(field: "\(field).superset", message: "must be a label of 1 to \(Self.maxSuperset) characters"))
        }
        if sets.isEmpty || sets.count > Self.maxSets {
            problems.append(.init(field: "\(field).sets", message: "must hold 1 to \(Self.maxSets) sets"))
        }
        for (index, set) in sets.prefix(Self.maxSets).enumerated() { problems += set.problems(at: "\(field).sets[\(index)]") }
        return problems
    }
}

/// A workout as a coach writes it (`POST`, `PUT`).
struct WorkoutBody: StrictJSONBody {
    var name: String
    var notes: String?
    var blocks: [WorkoutBlock]

    enum CodingKeys: String, CodingKey, CaseIterable { case name, notes, blocks }

    static let maxName = 200
    static let maxNotes = 2_000
    static let maxBlocks = 50

    /// Checks every field but whether the exercises exist (the store's part); every problem is named.
    func checked() throws -> WorkoutBody {
        var problems: [Problem.FieldError] = []
        let name = self.name.trimmingCharacters(in: .whitespacesAndNewlines)
        if name.isEmpty || name.codePoints > Self.maxName || name.hasInvisibleCharacters() {
            problems.append(.init(field: "name", message: "is required: 1 to \(Self.maxName) characters, without control or invisible characters"))
        }
        if let notes, notes.codePoints > Self.maxNotes || notes.hasInvisibleCharacters(allowing: ["\n"]) {
            problems.append(.init(field: "notes", message: "must be at most \(Self.maxNotes) characters, without control characters but line breaks"))
        }
        if blocks.isEmpty || blocks.count > Self.maxBlocks {
            problems.append(.init(field: "blocks", message: "must hold 1 to \(Self.maxBlocks) blocks"))
        }
        for (index, block) in blocks.prefix(Self.maxBlocks).enumerated() { problems += block.problems(at: "blocks[\(index)]") }
        if !problems.isEmpty { throw APIError.validation(problems) }
        var checked = self
        checked.name = name
        return checked
    }
}

extension KeyedDecodingContainer {
    /// A whole number, nil when absent or null. A fraction is refused naming its field: JSONDecoder's
    /// own error for one where an `Int` belongs carries no path, and would read as malformed JSON.
    func decodeWholeIfPresent(forKey key: Key) throws -> Int? {
        guard let number = try decodeIfPresent(Double.self, forKey: key) else { return nil }
        return try Self.whole(number, at: codingPath + [key])
    }

    func decodeWhole(forKey key: Key) throws -> Int {
        try Self.whole(try decode(Double.self, forKey: key), at: codingPath + [key])
    }

    /// A list of whole numbers, each fraction named by its place (`days_of_week[1]`).
    func decodeWholesIfPresent(forKey key: Key) throws -> [Int]? {
        try decodeIfPresent([Double].self, forKey: key)?.enumerated().map { index, number in
            try Self.whole(number, at: codingPath + [key, IndexKey(intValue: index)])
        }
    }

    /// `path` is worked out only for a refusal: a container's coding path is built anew on each
    /// read, for every number of every body.
    private static func whole(_ number: Double, at path: @autoclosure () -> [any CodingKey]) throws -> Int {
        guard number.rounded() == number, abs(number) < 1e9 else { throw DecodingError.dataCorrupted(.init(codingPath: path(), debugDescription: "must be a whole number")) }
        return Int(number)
    }
}

/// A place in a list, as a coding path names it.
private struct IndexKey: CodingKey {
    var intValue: Int?
    var stringValue: String { "\(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

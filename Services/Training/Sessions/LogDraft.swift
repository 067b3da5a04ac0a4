import Foundation
import ServiceKit

/// `POST /v1/training/sessions/{id}/log`, checked as far as it can be without the session: that its
/// blocks are the session's is checked by the statement that writes it (`SessionStore.LogQuery`),
/// which reads the session as it writes; a block past the session's last is then named here
/// (`init(_:blocks:)` with the session's count of blocks), with the log's other problems.
struct LogDraft: Sendable {
    struct Body: StrictJSONBody {
        struct LoggedSetBody: StrictJSONBody {
            var block: Int
            var set: Int
            var reps: Int?
            var durationS: Int?
            var distanceM: Double?
            var weightKg: Double?
            var weightLbs: Double?
            var rpe: Double?
            var done: Bool
            enum CodingKeys: String, CodingKey, CaseIterable {
                case block, set, reps, durationS = "duration_s", distanceM = "distance_m", weightKg = "weight_kg", weightLbs = "weight_lbs", rpe, done
            }

            init(from decoder: any Decoder) throws {
                // Nested objects are as strict as the body: a key this version does not know is refused.
                for key in try decoder.container(keyedBy: AnyKey.self).allKeys where CodingKeys(stringValue: key.stringValue) == nil {
                    throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath + [key], debugDescription: "unknown key \(key.stringValue)"))
                }
                let json = try decoder.container(keyedBy: CodingKeys.self)
                block = try json.decodeWhole(forKey: .block)
                set = try json.decodeWhole(forKey: .set)
                reps = try json.decodeWholeIfPresent(forKey: .reps)
                durationS = try json.decodeWholeIfPresent(forKey: .durationS)
                distanceM = try json.decodeIfPresent(Double.self, forKey: .distanceM)
                weightKg = try json.decodeIfPresent(Double.self, forKey: .weightKg)
                weightLbs = try json.decodeIfPresent(Double.self, forKey: .weightLbs)
                rpe = try json.decodeIfPresent(Double.self, forKey: .rpe)
                done = try json.decode(Bool.self, forKey: .done)
            }
        }
        var performedAt: String
        var sets: [LoggedSetBody]
        var notes: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case performedAt = "performed_at", sets, notes }
    }

    struct Set: Sendable {
        var block: Int
        var set: Int
        var reps: Int?
        var durationS: Int?
        var distanceM: Double?
        /// Exactly as given (decimal text of the JSON number); one of the two, or neither.
        var weightKg: String?
        var weightLbs: String?
        var rpe: Double?
        var done: Bool
    }

    var performedAt: Date
    /// The calendar day of `performedAt` in the offset it was given with: the client's own day.
    var localDay: String
    var sets: [Set]
    var notes: String?

    static let maxSets = 1_000

    /// A weight in the unit given: none (0), or from a thousandth of the unit up (a gram, or about
    /// half of one in pounds). A smaller one is no weight anyone lifts, and in pounds its exact kilograms can fall below the smallest `Double`,
    /// which PostgreSQL refuses to write as a number in the answer.
    static func isWeight(_ value: Double, upTo limit: Double) -> Bool {
        value.isFinite && (value == 0 || (0.001...limit).contains(value))
    }

    /// `blocks`: how many blocks the session has, when known.
    init(_ body: Body, blocks: Int? = nil, now: Date = Date()) throws {
        var problems: [Problem.FieldError] = []
        func problem(_ field: String, _ message: String) { problems.append(.init(field: field, message: message)) }

        let text = body.performedAt
        let performed = RFC3339.strictDate(from: text)
        if let date = performed {
            if date > now.addingTimeInterval(86_400) || date < Date(timeIntervalSince1970: 946_684_800) {
                problem("performed_at", "must be a moment between 2000 and a day from now")
            }
        } else {
            problem("performed_at", "must be an RFC 3339 date-time with its offset, such as 2026-03-01T07:30:00+01:00")
        }
        if body.sets.count > Self.maxSets { problem("sets", "must be at most \(Self.maxSets) sets") }
        // The coach reads them: a line break is "\n" or "\r\n", as in comments; a carriage return
        // alone could overwrite what a log viewer shows.
        if let notes = body.notes, notes.codePoints > 2000 || notes.replacingOccurrences(of: "\r\n", with: "\n").hasInvisibleCharacters(allowing: ["\n", "\t"]) {
            problem("notes", "must be at most 2000 characters without control characters")
        }
        var seen = Swift.Set<[Int]>()
        var sets: [Set] = []
        for (index, item) in body.sets.prefix(Self.maxSets).enumerated() {
            let field = "sets[\(index)]"
            // A session holds at most as many blocks as a workout, whatever it is.
            guard item.block >= 1, item.block <= blocks ?? WorkoutBody.maxBlocks else {
                problem("\(field).block", "must be the number of one of the session's \(blocks.map { "\($0) " } ?? "")blocks, from 1")
                continue
            }
            if !(1...50).contains(item.set) { problem("\(field).set", "must be 1 to 50") }
            if !seen.insert([item.block, item.set]).inserted { problem("\(field).set", "block \(item.block) set \(item.set) is logged twice") }
            if let reps = item.reps, !(0...1_000).contains(reps) { problem("\(field).reps", "must be 0 to 1000") }
            if let duration = item.durationS, !(0...86_400).contains(duration) { problem("\(field).duration_s", "must be 0 to 86400") }
            if let distance = item.distanceM, !(distance.isFinite && (0...1_000_000).contains(distance)) { problem("\(field).distance_m", "must be 0 to 1000000") }
            if let kg = item.weightKg, !Self.isWeight(kg, upTo: 1_000) { problem("\(field).weight_kg", "must be 0, or 0.001 to 1000") }
            if let lbs = item.weightLbs, !Self.isWeight(lbs, upTo: 2_200) { problem("\(field).weight_lbs", "must be 0, or 0.001 to 2200") }
            if item.weightKg != nil, item.weightLbs != nil { problem("\(field).weight_lbs", "give the weight once: weight_kg or weight_lbs") }
            if let rpe = item.rpe, !(rpe.isFinite && (1...10).contains(rpe)) { problem("\(field).rpe", "must be 1 to 10") }
            sets.append(
                Set(
                    block: item.block, set: item.set, reps: item.reps, durationS: item.durationS, distanceM: item.distanceM,
                    weightKg: item.weightKg.map { String(describing: $0) }, weightLbs: item.weightLbs.map { String(describing: $0) }, rpe: item.rpe, done: item.done))
        }
        guard problems.isEmpty, let performed else { throw APIError.validation(problems) }
        performedAt = performed
        localDay = String(text.prefix(10))
        self.sets = sets
        notes = body.notes
    }
}

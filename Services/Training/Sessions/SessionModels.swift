import Foundation
import Hummingbird
import ServiceKit

/// The unit a user reads weights in. Weights are stored in kilograms; a pound is 0.45359237 kg
/// exactly (the international avoirdupois pound), so a weight given in pounds reads back exactly.
enum WeightUnit: String, Codable, Sendable {
    case kg, lbs
    static let kilogramsPerPound = 0.45359237
    /// The SQL that turns a `numeric` of kilograms into this unit (exact in `numeric`, rounded to
    /// millionths only for the wire).
    func sql(_ kilograms: String) -> String {
        switch self {
        case .kg: "(\(kilograms))::text"
        case .lbs: "round((\(kilograms)) / 0.45359237, 6)::text"
        }
    }

    /// The same, in the unit a statement's parameter names (`'kg'` or `'lbs'`): one text for both, so
    /// the statement can be prepared once.
    static func sql(_ kilograms: String, inUnit parameter: String) -> String {
        "CASE WHEN \(parameter) = 'lbs' THEN \(WeightUnit.lbs.sql(kilograms)) ELSE \(WeightUnit.kg.sql(kilograms)) END"
    }

    /// A prescribed weight (a number in the template) in this unit, for display.
    func display(_ kilograms: Double) -> Double {
        switch self {
        case .kg: kilograms
        case .lbs: (kilograms / Self.kilogramsPerPound * 1_000_000).rounded() / 1_000_000
        }
    }
}

/// One block of a session: a copy of the workout's block, with the exercise's name frozen beside its
/// id. Stored as JSON in `sessions.blocks`.
struct SessionBlock: Codable, Sendable {
    struct PrescribedSet: Codable, Sendable {
        var reps: Int?
        var durationS: Int?
        var distanceM: Double?
        var weightKg: Double?
        var rpe: Double?
        var restS: Int?
        enum CodingKeys: String, CodingKey { case reps, durationS = "duration_s", distanceM = "distance_m", weightKg = "weight_kg", rpe, restS = "rest_s" }
    }

    var exerciseID: UUID
    var exerciseName: String?
    var notes: String?
    var superset: String?
    var sets: [PrescribedSet]
    enum CodingKeys: String, CodingKey { case exerciseID = "exercise_id", exerciseName = "exercise_name", notes, superset, sets }
}

/// A session as stored, without its logged sets and comments.
struct SessionRecord: Sendable {
    var id: UUID
    var coachID: UUID?
    var rosterEntryID: UUID?
    var clientID: UUID?
    var workoutID: UUID?
    var name: String
    var notes: String?
    var blocks: [SessionBlock]
    var scheduledOn: String
    var status: String
    var performedAt: Date?
    var logNotes: String?
    var skipReason: String?
    var createdAt: Date
    var updatedAt: Date
    /// Whether its coach still coaches its client (the roster entry pending or accepted): only then
    /// does the coach hear of the client's log and comments. False where a statement did not ask.
    var coachLinked = false
    /// The row's version as read (its `ETag`), for a write that must find the session unchanged.
    var version = 0
    /// Whether its coach pushed new blocks onto it since it was assigned. False where a statement did
    /// not ask.
    var pushed = false
    /// When its plan ended, if it did before the client did it (`cancelled`); nil where a statement
    /// did not ask.
    var cancelledAt: Date?

    /// Whether the client has done anything with it: logged or skipped. Push and unscheduling leave a
    /// started session alone.
    var started: Bool { status != "scheduled" && status != "cancelled" }

    /// Whether a workout performed at `moment` may be logged against it: unless its plan ended
    /// (`cancelled`) before then. A session logged after its cancellation keeps it: a correction is
    /// held to it as the first log was.
    func takesLog(performedAt moment: Date) -> Bool {
        guard let cancelledAt else { return status != "cancelled" }
        return moment <= cancelledAt
    }
}

/// One logged set, with its weight in kilograms and in the reader's unit (both exact decimal text).
struct LoggedSet: Sendable {
    var block: Int
    var set: Int
    var exerciseID: UUID
    var exerciseName: String?
    var reps: Int?
    var durationS: Int?
    var distanceM: Double?
    var weightKg: Double?
    var weight: Double?
    var rpe: Double?
    var done: Bool
}

struct LoggedSetView: Encodable, Sendable {
    var set: LoggedSet
    var unit: WeightUnit
    func encode(to encoder: any Encoder) throws {
        var json = encoder.container(keyedBy: AnyKey.self)
        try json.encode(set.block, forKey: AnyKey("block"))
        try json.encodeOrNull(set.distanceM, forKey: AnyKey("distance_m"))
        try json.encode(set.done, forKey: AnyKey("done"))
        try json.encodeOrNull(set.durationS, forKey: AnyKey("duration_s"))
        try json.encode(set.exerciseID, forKey: AnyKey("exercise_id"))
        try json.encodeOrNull(set.exerciseName, forKey: AnyKey("exercise_name"))
        try json.encodeOrNull(set.reps, forKey: AnyKey("reps"))
        try json.encodeOrNull(set.rpe, forKey: AnyKey("rpe"))
        try json.encode(set.set, forKey: AnyKey("set"))
        try json.encodeOrNull(set.weight, forKey: AnyKey("weight"))
        try json.encodeOrNull(set.weightKg, forKey: AnyKey("weight_kg"))
        try json.encode(unit, forKey: AnyKey("weight_unit"))
    }
}

/// A comment on a session.
struct CommentView: Encodable, Sendable {
    var id: UUID
    var authorID: UUID
    var authorRole: String
    var text: String
    var createdAt: Date
    enum CodingKeys: String, CodingKey { case id, authorID = "author_id", authorRole = "author_role", text, createdAt = "created_at" }
}

extension CommentView: ResponseEncodable {}

/// A session as a list shows it: what is prescribed, its state, in the reader's unit.
struct SessionView: Encodable, Sendable {
    var session: SessionRecord
    var unit: WeightUnit

    struct BlockView: Encodable {
        var block: SessionBlock
        var unit: WeightUnit
        func encode(to encoder: any Encoder) throws {
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encode(block.exerciseID, forKey: AnyKey("exercise_id"))
            try json.encodeOrNull(block.exerciseName, forKey: AnyKey("exercise_name"))
            try json.encodeOrNull(block.notes, forKey: AnyKey("notes"))
            try json.encode(block.sets.map { SetView(set: $0, unit: unit) }, forKey: AnyKey("sets"))
            try json.encodeOrNull(block.superset, forKey: AnyKey("superset"))
        }
    }

    struct SetView: Encodable {
        var set: SessionBlock.PrescribedSet
        var unit: WeightUnit
        func encode(to encoder: any Encoder) throws {
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encodeOrNull(set.distanceM, forKey: AnyKey("distance_m"))
            try json.encodeOrNull(set.durationS, forKey: AnyKey("duration_s"))
            try json.encodeOrNull(set.reps, forKey: AnyKey("reps"))
            try json.encodeOrNull(set.restS, forKey: AnyKey("rest_s"))
            try json.encodeOrNull(set.rpe, forKey: AnyKey("rpe"))
            try json.encodeOrNull(set.weightKg.map(unit.display), forKey: AnyKey("weight"))
            try json.encodeOrNull(set.weightKg, forKey: AnyKey("weight_kg"))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var json = encoder.container(keyedBy: AnyKey.self)
        try json.encode(session.blocks.map { BlockView(block: $0, unit: unit) }, forKey: AnyKey("blocks"))
        try json.encode(session.clientID, forKey: AnyKey("client_id"))
        try json.encode(session.coachID, forKey: AnyKey("coach_id"))
        try json.encode(session.createdAt, forKey: AnyKey("created_at"))
        try json.encode(session.id, forKey: AnyKey("id"))
        try json.encode(session.name, forKey: AnyKey("name"))
        try json.encodeOrNull(session.notes, forKey: AnyKey("notes"))
        try json.encode(session.performedAt, forKey: AnyKey("performed_at"))
        try json.encode(session.scheduledOn, forKey: AnyKey("scheduled_on"))
        try json.encodeOrNull(session.skipReason, forKey: AnyKey("skip_reason"))
        try json.encode(session.status, forKey: AnyKey("status"))
        try json.encode(session.updatedAt, forKey: AnyKey("updated_at"))
        // The `ETag` of the session as this view shows it: what a log of it sends in `If-Match`.
        try json.encode(session.version, forKey: AnyKey("version"))
        try json.encode(unit, forKey: AnyKey("weight_unit"))
        try json.encode(session.workoutID, forKey: AnyKey("workout_id"))
    }
}

/// A session with what was logged against it and its comments.
struct SessionDetail: Encodable, Sendable, ResponseEncodable {
    var session: SessionRecord
    var unit: WeightUnit
    var sets: [LoggedSet]
    var comments: [CommentView]

    /// The detail with the session's version as its `ETag`.
    var tagged: EditedResponse<SessionDetail> {
        EditedResponse(headers: [.eTag: EntityTag(version: Int64(session.version)).description], response: self)
    }

    func encode(to encoder: any Encoder) throws {
        try SessionView(session: session, unit: unit).encode(to: encoder)
        var json = encoder.container(keyedBy: AnyKey.self)
        try json.encode(comments, forKey: AnyKey("comments"))
        try json.encodeOrNull(session.logNotes, forKey: AnyKey("log_notes"))
        try json.encode(sets.map { LoggedSetView(set: $0, unit: unit) }, forKey: AnyKey("logged_sets"))
    }
}

import Foundation
import Hummingbird
import Models
import ServiceKit

/// An exercise as the API writes it.
struct ExerciseView: Codable, Sendable, ResponseEncodable {
    var id: UUID
    var name: String
    /// `library` (the shared data set) or `coach` (a coach's own, `coach_id`).
    var source: String
    @Nullable var coachID: UUID?
    @Nullable var category: String?
    @Nullable var level: String?
    @Nullable var equipment: String?
    @Nullable var force: String?
    @Nullable var mechanic: String?
    var primaryMuscles: [String]
    var secondaryMuscles: [String]
    var instructions: [String]
    var images: [String]
    var createdAt: Date
    var updatedAt: Date

    enum CodingKeys: String, CodingKey {
        case id, name, source, coachID = "coach_id", category, level, equipment, force, mechanic, primaryMuscles = "primary_muscles"
        case secondaryMuscles = "secondary_muscles", instructions, images, createdAt = "created_at", updatedAt = "updated_at"
    }

    init(_ record: ExerciseRecord) {
        id = record.id
        name = record.name
        source = record.coachID == nil ? "library" : "coach"
        coachID = record.coachID
        category = record.category
        level = record.level
        equipment = record.equipment
        force = record.force
        mechanic = record.mechanic
        primaryMuscles = record.primaryMuscles
        secondaryMuscles = record.secondaryMuscles
        instructions = record.instructions
        images = record.images
        createdAt = record.createdAt
        updatedAt = record.updatedAt
    }
}

/// A coach's exercise as written: `POST` takes every field (only `name` required), `PATCH` the
/// fields that change (`null` clears one).
struct ExerciseBody: StrictJSONBody {
    /// A field of a `PATCH`: absent (unchanged), or the new value (nil clears it).
    enum Change<Value: Sendable>: Sendable {
        case unchanged
        case set(Value?)
    }

    var name: Change<String> = .unchanged
    var category: Change<String> = .unchanged
    var level: Change<String> = .unchanged
    var equipment: Change<String> = .unchanged
    var force: Change<String> = .unchanged
    var mechanic: Change<String> = .unchanged
    var primaryMuscles: Change<[String]> = .unchanged
    var secondaryMuscles: Change<[String]> = .unchanged
    var instructions: Change<[String]> = .unchanged
    var images: Change<[String]> = .unchanged

    enum CodingKeys: String, CodingKey, CaseIterable {
        case name, category, level, equipment, force, mechanic, primaryMuscles = "primary_muscles", secondaryMuscles = "secondary_muscles"
        case instructions, images
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func change<Value: Decodable & Sendable>(_ key: CodingKeys) throws -> Change<Value> {
            guard container.contains(key) else { return .unchanged }
            return try container.decodeNil(forKey: key) ? .set(nil) : .set(container.decode(Value.self, forKey: key))
        }
        name = try change(.name)
        category = try change(.category)
        level = try change(.level)
        equipment = try change(.equipment)
        force = try change(.force)
        mechanic = try change(.mechanic)
        primaryMuscles = try change(.primaryMuscles)
        secondaryMuscles = try change(.secondaryMuscles)
        instructions = try change(.instructions)
        images = try change(.images)
    }

    static let maxName = 200
    static let maxInstructions = 30
    static let maxInstruction = 2_000
    static let maxImages = 10
    static let maxURL = 2_048

    /// The fields after this change to `before` (a new exercise: to nothing), checked; every problem is named.
    func fields(over before: ExerciseRecord?) throws -> ExerciseFields {
        var problems: [Problem.FieldError] = []
        func value<Value>(_ change: Change<Value>, _ old: Value?) -> Value? {
            if case .set(let new) = change { return new }
            return old
        }
        func word(_ change: Change<String>, _ old: String?, _ field: String, _ allowed: Set<String>) -> String? {
            guard let text = value(change, old) else { return nil }
            if !allowed.contains(text) { problems.append(.init(field: field, message: "must be one of \(ExerciseVocabulary.list(allowed)), or null")) }
            return text
        }
        func muscles(_ change: Change<[String]>, _ old: [String]?, _ field: String) -> [String] {
            let list = value(change, old) ?? []
            if let bad = list.firstIndex(where: { !ExerciseVocabulary.muscles.contains($0) }) {
                problems.append(.init(field: "\(field)[\(bad)]", message: "must be one of \(ExerciseVocabulary.list(ExerciseVocabulary.muscles))"))
            } else if Set(list).count != list.count {
                problems.append(.init(field: field, message: "must not name a muscle twice"))
            }
            return list
        }
        let rawName = value(name, before?.name)
        let trimmed = rawName?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if trimmed.isEmpty || trimmed.codePoints > Self.maxName || trimmed.hasInvisibleCharacters() {
            problems.append(.init(field: "name", message: "is required: 1 to \(Self.maxName) characters, without control or invisible characters"))
        }
        let category = word(self.category, before?.category, "category", ExerciseVocabulary.categories)
        let level = word(self.level, before?.level, "level", ExerciseVocabulary.levels)
        let equipment = word(self.equipment, before?.equipment, "equipment", ExerciseVocabulary.equipment)
        let force = word(self.force, before?.force, "force", ExerciseVocabulary.forces)
        let mechanic = word(self.mechanic, before?.mechanic, "mechanic", ExerciseVocabulary.mechanics)
        let primary = muscles(primaryMuscles, before?.primaryMuscles, "primary_muscles")
        let secondary = muscles(secondaryMuscles, before?.secondaryMuscles, "secondary_muscles")
        let steps = value(instructions, before?.instructions) ?? []
        if steps.count > Self.maxInstructions {
            problems.append(.init(field: "instructions", message: "must hold at most \(Self.maxInstructions) steps"))
        } else if let bad = steps.firstIndex(where: {
            $0.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty || $0.codePoints > Self.maxInstruction || $0.hasInvisibleCharacters(allowing: ["\n"])
        }) {
            problems.append(.init(field: "instructions[\(bad)]", message: "must be 1 to \(Self.maxInstruction) characters, without control characters but line breaks"))
        }
        let urls = value(images, before?.images) ?? []
        if urls.count > Self.maxImages {
            problems.append(.init(field: "images", message: "must hold at most \(Self.maxImages) URLs"))
        } else if let bad = urls.firstIndex(where: { url in
            url.codePoints > Self.maxURL || !url.hasPrefix("https://") || URL(string: url)?.host?.isEmpty != false
        }) {
            problems.append(.init(field: "images[\(bad)]", message: "must be an https URL of at most \(Self.maxURL) characters"))
        }
        if !problems.isEmpty { throw APIError.validation(problems) }
        return ExerciseFields(
            name: trimmed, category: category, level: level, equipment: equipment, force: force, mechanic: mechanic,
            primaryMuscles: primary, secondaryMuscles: secondary, instructions: steps, images: urls)
    }
}

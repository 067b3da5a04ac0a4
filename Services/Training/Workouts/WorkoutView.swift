import Foundation
import Hummingbird
import Models

/// A workout as the API writes it.
struct WorkoutView: Codable, Sendable, ResponseEncodable {
    var id: UUID
    var name: String
    @Nullable var notes: String?
    var blocks: [WorkoutBlock]
    var createdAt: Date
    var updatedAt: Date

    enum CodingKeys: String, CodingKey {
        case id, name, notes, blocks, createdAt = "created_at", updatedAt = "updated_at"
    }

    init(_ record: WorkoutRecord) {
        id = record.id
        name = record.name
        notes = record.notes
        blocks = record.blocks
        createdAt = record.createdAt
        updatedAt = record.updatedAt
    }
}

/// A workout in the coach's list: what it is, without its sets.
struct WorkoutSummary: Codable, Sendable {
    var id: UUID
    var name: String
    @Nullable var notes: String?
    var blockCount: Int
    var setCount: Int
    var exerciseIDs: [UUID]
    var createdAt: Date
    var updatedAt: Date

    enum CodingKeys: String, CodingKey {
        case id, name, notes, blockCount = "block_count", setCount = "set_count", exerciseIDs = "exercise_ids", createdAt = "created_at", updatedAt = "updated_at"
    }

    init(_ record: WorkoutRecord) {
        id = record.id
        name = record.name
        notes = record.notes
        blockCount = record.blocks.count
        setCount = record.blocks.reduce(0) { $0 + $1.sets.count }
        var seen = Set<UUID>()
        exerciseIDs = record.blocks.map(\.exerciseID).filter { seen.insert($0).inserted }
        createdAt = record.createdAt
        updatedAt = record.updatedAt
    }
}

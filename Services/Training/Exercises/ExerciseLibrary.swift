import Foundation
import ServiceKit

/// The exercise library shipped in `Resources/exercises.json` (free-exercise-db; source, commit and
/// licence in `Resources/README.md`), loaded by a migration of its own: the SQL below with the file's
/// text in it. Its checksum is then the file's, so an edited file stops start-up as an edited
/// migration would.
enum ExerciseLibrary {
    /// The data set's commit the file was taken from: its images are served from there.
    static let sourceCommit = "acd61f751fe15d618862ee3084f27e839222a28f"
    static let imageBase = "https://raw.githubusercontent.com/yuhonas/free-exercise-db/\(sourceCommit)/exercises/"
    static let migrationName = "0001_training_library"

    struct Unusable: Error, CustomStringConvertible {
        var description: String
    }

    /// The migration that upserts the library's rows by the data set's ids (stable UUIDs made from them).
    static func migration(bundle: Bundle) throws -> Migration {
        guard let url = bundle.url(forResource: "exercises", withExtension: "json", subdirectory: "Resources") else {
            throw Unusable(description: "Resources/exercises.json is missing from the bundle")
        }
        return try migration(json: String(contentsOf: url, encoding: .utf8))
    }

    static func migration(json: String) throws -> Migration {
        // The text goes into the statement dollar-quoted: it must not close the quote itself.
        guard !json.contains("$library$") else { throw Unusable(description: "Resources/exercises.json contains the quote $library$") }
        let sql = """
            INSERT INTO exercises (id, source_id, name, category, level, equipment, force, mechanic,
                primary_muscles, secondary_muscles, instructions, images)
            SELECT md5('free-exercise-db:' || e.id)::uuid, e.id, e.name, e.category, e.level, e.equipment, e.force, e.mechanic,
                ARRAY(SELECT jsonb_array_elements_text(coalesce(e."primaryMuscles", '[]'))),
                ARRAY(SELECT jsonb_array_elements_text(coalesce(e."secondaryMuscles", '[]'))),
                ARRAY(SELECT jsonb_array_elements_text(coalesce(e.instructions, '[]'))),
                ARRAY(SELECT '\(imageBase)' || image FROM jsonb_array_elements_text(coalesce(e.images, '[]')) AS image)
            FROM jsonb_to_recordset($library$\(json)$library$::jsonb) AS e(
                id text, name text, category text, level text, equipment text, force text, mechanic text,
                "primaryMuscles" jsonb, "secondaryMuscles" jsonb, instructions jsonb, images jsonb)
            ON CONFLICT (source_id) DO UPDATE SET
                name = EXCLUDED.name, category = EXCLUDED.category, level = EXCLUDED.level, equipment = EXCLUDED.equipment,
                force = EXCLUDED.force, mechanic = EXCLUDED.mechanic, primary_muscles = EXCLUDED.primary_muscles,
                secondary_muscles = EXCLUDED.secondary_muscles, instructions = EXCLUDED.instructions, images = EXCLUDED.images,
                version = exercises.version + 1, updated_at = now()
            """
        return Migration(name: migrationName, sql: sql)
    }
}

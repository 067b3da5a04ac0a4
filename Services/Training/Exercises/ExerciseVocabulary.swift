/// The values the library's fields take (those of free-exercise-db): filters and a coach's own
/// exercises use the same words, so that a filter finds both.
enum ExerciseVocabulary {
    static let muscles: Set<String> = [
        "abdominals", "abductors", "adductors", "biceps", "calves", "chest", "forearms", "glutes", "hamstrings", "lats",
        "lower back", "middle back", "neck", "quadriceps", "shoulders", "traps", "triceps",
    ]
    static let equipment: Set<String> = [
        "bands", "barbell", "body only", "cable", "dumbbell", "e-z curl bar", "exercise ball", "foam roll", "kettlebells",
        "machine", "medicine ball", "other",
    ]
    static let levels: Set<String> = ["beginner", "intermediate", "expert"]
    static let forces: Set<String> = ["push", "pull", "static"]
    static let mechanics: Set<String> = ["compound", "isolation"]
    static let categories: Set<String> = [
        "cardio", "olympic weightlifting", "plyometrics", "powerlifting", "strength", "stretching", "strongman",
    ]

    static func list(_ values: Set<String>) -> String { values.sorted().joined(separator: ", ") }
}

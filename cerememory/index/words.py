"""Word lists for English text analysis: the stop words the index drops, and the words that
make a sentence a question without saying what it is about."""

from __future__ import annotations

# Function words (NLTK's English list): they match nearly every memory, so a query that keeps
# them ranks by how often a record says "did" or "what" rather than by what it is about.
STOP_WORDS: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing a an the and
but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here
there when where why how all any both each few more most other some such no nor not only own
same so than too very s t can will just don should now d ll m o re ve y ain aren couldn didn
doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn
""".split())

# What a question is made of besides its topic: interrogatives, auxiliaries, and the nouns of
# "what kind of", "how many times"
QUESTION_WORDS: frozenset[str] = frozenset("""
what when where which who whom whose why how did does do is are was were has have had can could
would should will might may kind kinds sort type types many much often times
""".split())

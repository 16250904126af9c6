delete from documents;
